"""The contracts every layer shares: a candidate, a measurement, the metrics, the trial record's
names and the trials table's columns, the errors."""
