"""Stage 2: what one rank's traces measure, kept beside each trace as its analysis record
(:mod:`.record`)."""
