"""Config-driven experiments: the YAML config, the runner, what an experiment produced, and its
report."""
