"""Entry point of `python -m rossmann_jobs.synth`."""
import sys

from rossmann_jobs.synth.cli import main

sys.exit(main())
