"""Result-file readers, tables and plots (installed as mpiec.analysis)."""
