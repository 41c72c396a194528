"""A two-second experiment for the runner's tests: jobs square their x."""

SPEC = QUICK = None


def jobs(spec, seeds):
    return [{"model": m, "x": x, "seed": s} for m in ("Logit", "EFA") for x in (1, 2)
            for s in range(seeds)]


def task(job):
    return {**job, "y": job["x"] ** 2}
