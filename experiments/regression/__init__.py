"""In-context regression against the Bayes-optimal GP (the UNN note)."""
