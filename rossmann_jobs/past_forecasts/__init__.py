"""Scores of published forecasts against the actuals of later drops: Spark scoring, JSON records (their page:
reporting/scores_page.py)."""
