"""Feature engineering for the Rossmann data: pure DataFrame -> DataFrame steps and the feature spec."""
