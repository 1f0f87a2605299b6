"""Every page and plot of the product, one module each, on the shared HTML helpers (html.py).

html.py             one self-contained HTML page of embedded PNGs: what every page shares
forecast_page.py    the forecast report's plots and page (pandas frames in, HTML out)
forecast_report.py  the forecast report assembled in the predict job: Spark aggregates, the run's facts, index.html
scores_page.py      the scores report's plots and page (the score job's summary.json in, HTML out)
training_curves.py  the train job's loss and exp-RMSPE curves (training_curves.png, reused by the forecast page)

The Airflow side's link to a report (plugins/rossmann/report_link.py) is not a page and imports none of these.
"""
