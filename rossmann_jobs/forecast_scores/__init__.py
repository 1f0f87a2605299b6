"""Scores of published forecasts against the actuals of later drops: Spark scoring, JSON records, the scores page."""
