"""The model, one module per part: its saved format (files), where it may be loaded from (trust), opening a stored
one (store), the hyperparameters it is built with (params), the network (architecture: Keras, for training), its
numpy forward pass (forward_pass), built once per Python worker (cache) and applied on the executors (broadcast).

Nothing here imports the forecast or training packages. Kept free of imports: the Airflow side imports trust.py
(standard library only) through this package.
"""
