"""The application's use-cases, the layer under the CLI: a campaign (load, validate, run, report),
device calibration, a trial's profile, a bundle's export and verification, the catalog of parts."""
