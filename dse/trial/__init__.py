"""A trial on its device: the candidate's model prepared and built, timed inside its telemetry
window, screened, dueled, exported — what a device worker runs, apart from the Ray plumbing that
carries it there (:mod:`dse.farm`)."""
