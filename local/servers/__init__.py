"""Scripts `longrun serve` runs in a runtime's own virtualenv (local/runtimes.py): each imports
only that env's packages, never longrun's."""
