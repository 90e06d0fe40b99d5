"""The search: space -> Optuna study -> candidates; fronts. Import submodules for the heavy parts."""
