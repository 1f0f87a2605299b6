# The two README commands are `make demo` and `make test`; everything else is a building block.
.PHONY: setup demo test test-fast ui ui-stop dist clean

setup:
	bash scripts/setup_env.sh

demo: setup
	bash scripts/demo.sh $(ARGS)

test:
	bash scripts/test.sh

test-fast:  ## skip the slow end-to-end tests
	bash scripts/test.sh -m "not slow"

ui: setup
	bash scripts/airflow_ui.sh

ui-stop:
	bash scripts/airflow_ui.sh --stop

dist:  ## the two wheels (rossmann-forecast: the Airflow side; rossmann-jobs) and the job package's zip for --py-files
	mkdir -p dist && rm -f dist/rossmann_jobs.zip dist/*.whl && zip -qr dist/rossmann_jobs.zip rossmann_jobs -x '*__pycache__*'
	bash scripts/build_wheels.sh dist

clean:
	rm -rf .venvs var dist build
