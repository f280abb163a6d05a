"""How the neural models run on this machine: precision per CPU, thread and batch use, CPU
emulation for tests, int8 outlier channels, and local (offline) model directories."""
