"""What every stage shares: the `Stage` base class and its operators, the declared parameters,
and fusion (combining the scores of several stages)."""
