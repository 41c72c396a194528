"""results.json -> summary.md (counts by area, then every non-OK finding)."""
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

BASE = Path(os.environ.get("EFA_PROBES", "/tmp/probes"))
R = json.load(open(BASE / "results.json"))
P = R["probes"]
OUT = ["OK-clear-error", "OK-works", "UNHELPFUL-crash", "SILENT-WRONG", "SECURITY"]
D, F, T = "src/efa/core/data.py", "src/efa/core/fields.py", "src/efa/core/families.py"
OVR = {  # id: (should, fix) where the probe did not carry them
    "sequences-029": ("ValueError naming field 'x' and sequence 0 (ragged item vectors)", f"{D}: _pad (wrap np.asarray)"),
    "sequences-045": ("IndexError naming the accepted index types", f"{D}: Sequences.__getitem__"),
    "sequences-063": ("ValueError naming the file ('order' must be a list of field names)", f"{D}: Sequences.load"),
    "sequences-068": ("ValueError: per_row must be a positive integer", f"{D}: Sequences.split_scored"),
    "sequences-069": ("ValueError: per_row must be a positive integer", f"{D}: Sequences.split_scored"),
    "sequences-071": ("ValueError: per_row must be a positive integer", f"{D}: Sequences.thin_scored"),
    "sequences-095": ("a nullable boolean column becomes int64 0/1 with NA unobserved", f"{D}: Sequences.from_frame"),
    "fields-028": ("ValueError naming bag_l2", f"{F}: Category.__post_init__ (float('big') raises first)"),
    "fields-031": ("ValueError: labels must be strings or numbers", f"{F}: Category.__post_init__ (set(labels) before the type check)"),
    "fields-042": ("ValueError naming feeds", f"{F}: _check_feeds (tuple(5))"),
    "fields-053": ("ValueError: num_values must be a positive integer", f"{F}: Value.__post_init__"),
    "fields-060": ("ValueError naming loc", f"{F}: Value.__post_init__ (float('abc') raises first)"),
    "fields-064": ("ValueError naming readout_hidden", f"{F}: Value.__post_init__"),
    "fields-065": ("ValueError naming readout_hidden", f"{F}: Value.__post_init__"),
    "fields-066": ("ValueError naming readout_hidden (or accept an int)", f"{F}: Value.__post_init__"),
    "fields-074": ("refuse a non-finite loc", f"{F}: Attribute.__post_init__"),
    "fields-075": ("ValueError: hidden must be a positive integer", f"{F}: Attribute.__post_init__"),
    "fields-076": ("ValueError: loc must be a list of size numbers (or accept a scalar for size 1)", f"{F}: Attribute.__post_init__"),
    "families-004": ("ValueError naming num_categories", f"{T}: _integer"),
    "families-005": ("ValueError naming num_categories", f"{T}: _integer"),
    "families-008": ("ValueError naming shift", f"{T}: Poisson.__init__"),
    "families-009": ("ValueError naming shift", f"{T}: Poisson.__init__"),
    "families-010": ("ValueError naming shift", f"{T}: Poisson.__init__"),
    "families-015": ("ValueError naming total_count", f"{T}: _integer"),
    "families-016": ("ValueError naming total_count", f"{T}: _integer"),
    "families-017": ("ValueError naming total_count", f"{T}: _integer"),
    "families-021": ("ValueError naming total_count", f"{T}: NegativeBinomial.__init__"),
    "families-029": ("refuse a non-finite init_sigma", f"{T}: LearnedGaussian.__init__"),
    "families-032": ("refuse a non-finite min_scale", f"{T}: _non_negative"),
    "families-034": ("refuse a non-finite floor", f"{T}: _non_negative"),
    "families-058": ("a count >= 0 (or an error): exp(100) overflows the int64 cast to -2^63", f"{T}: Poisson.sample (and NegativeBinomial.sample)"),
    "model-063": ("ValueError: at must be a bool tensor of shape [1, 3]", "src/efa/core/model.py: ConditionalModel.predict_mean"),
    "train-061": ("ValueError '<checkpoint> is damaged'", "src/efa/training/train.py: _restore (compare shapes inside the try block)"),
    "train-076": ("use the first target field or refuse None clearly", "src/efa/training/train.py: predictions"),
    "train-077": ("ValueError: field 'y' has no predicted position in the data (mean_squared_error has that check, but predictions crashes before it)", "src/efa/training/train.py: predictions (skip batches with no predicted position; mean.reshape(0, -1) fails)"),
    "train-081": ("ValueError naming seed", "src/efa/training/train.py: seed_everything"),
    "tabular-033": ("ValueError: cell_dropout must be in [0, 1)", "src/efa/tabular.py: _check_params"),
    "tabular-087": ("classes_ in the Categorical's order lo < mid < hi (README: 'classes in a pandas Categorical y's order'); a bare pd.Categorical has .categories but no .cat, so they come out sorted: hi < lo < mid", "src/efa/tabular.py: fit (order = y.categories for a pd.Categorical)"),
    "regression-005": ("TypeError: column 'x' must be numeric (a pandas 'string' column makes np.issubdtype raise)", "src/efa/regression.py: frame_to_sequences (use pd.api.types.is_numeric_dtype)"),
    "regression-029": ("ValueError: targets need column 'function'", "src/efa/regression.py: predict_frame"),
    "spatial-004": ("ValueError: lags must be an integer >= 0", "src/efa/spatial.py: frame_to_sequences"),
    "spatial-008": ("ValueError: lat/lon must be numeric", "src/efa/spatial.py: frame_to_sequences"),
    "spatial-017": ("refuse a non-boolean target column", "src/efa/spatial.py: frame_to_sequences"),
    "spatial-018": ("ValueError: column 'station' has missing site ids (the message blames `sites`, which the user did not pass)", "src/efa/spatial.py: frame_to_sequences"),
    "spatial-019": ("ValueError: step does not match the time column's type", "src/efa/spatial.py: frame_to_sequences"),
    "spatial-027": ("ValueError/TypeError: means must be a tensor with one entry per site", "src/efa/spatial.py: anomalies"),
    "spatial-029": ("KeyError/ValueError: the data have no field 'nope'", "src/efa/spatial.py: _moments"),
    "spatial-040": ("ValueError: k must be an integer", "src/efa/geo.py: nearest_neighbours"),
    "analogy-028": ("3CosAdd is scale-invariant: the same hits (the norms underflow to 0, the rows count as zero vectors)", "src/efa/analogy.py: answer (scale rows before np.linalg.norm)"),
    "embeddings-005": ("ValueError: sentences must be an integer array [N, S] (all of one length)", "src/efa/embeddings.py: _sentences"),
    "embeddings-018": ("ValueError naming quads and the bad row id", "src/efa/embeddings.py: offset_residuals"),
    "embeddings-020": ("KeyError/ValueError saying which question word is not in vocab", "src/efa/embeddings.py: quadruples"),
    "generators-019": ("TypeError: spec must be a NoteGP", "src/efa/generators/gp.py: sample_note"),
    "generators-026": ("TNPGP refuses noise=inf", "src/efa/generators/gp.py: TNPGP.__post_init__"),
    "generators-027": ("TNPGP refuses x_low=-inf", "src/efa/generators/gp.py: TNPGP.__post_init__"),
    "generators-033": ("ValueError: x and k must have the same shape", "src/efa/generators/gp.py: covariance"),
    "generators-045": ("ValueError naming offset", "src/efa/generators/latent.py: ExpFamilyLatent.__post_init__"),
    "generators-047": ("ValueError: dim must be a positive integer (True is a bool)", "src/efa/generators/latent.py: _check_design"),
    "generators-054": ("ValueError: covariates must have shape [n, length, dim]", "src/efa/generators/latent.py: _draw_linear / GPLatent.sample"),
    "generators-055": ("accept an array or say covariates must be a tensor", "src/efa/generators/latent.py: _draw_linear"),
    "generators-074": ("TypeError: fields must be Field objects, got str", "src/efa/generators/teacher.py: attention_teacher"),
    "baselines-002": ("ValueError: direction must be 'bidirectional' or 'unidirectional'", "src/efa/baselines/fm.py: ValueFM.__init__"),
    "baselines-005": ("ValueError: dim must be a positive integer", "src/efa/baselines/fm.py: CategoricalFM.__init__"),
    "baselines-008": ("ValueError: k must be a positive integer", "src/efa/baselines/fm.py: KNNFM.__init__"),
    "cli-033": ("ValueError naming the file and 'seeds'", "experiments/summary.py: tables"),
    "cli-050": ("efa: error naming the data file ('not a complete sequences file')", "src/efa/core/data.py: Sequences.load"),
    "runner-024": ("FileExistsError asking for --force (as for invalid JSON)", "experiments/runner.py: check_destination"),
    "misc-007": ("ValueError: noise must be >= 0", "src/efa/datasets/tabular.py: simulate"),
    "misc-008": ("ValueError: n must be a positive integer (returns two empty tables)", "src/efa/datasets/tabular.py: simulate"),
    "misc-009": ("ValueError: n_cat must be >= 2 (every cell becomes 0)", "src/efa/datasets/tabular.py: simulate"),
}

areas = list(dict.fromkeys(p["area"] for p in P))
c = defaultdict(Counter)
for p in P:
    c[p["area"]][p["outcome"]] += 1
lines = ["# efa hostile probes, round 2", "",
         f"{len(P)} probes, {R['total_seconds']} s wall on 1 torch thread (efa {R['efa']}). "
         "Script: `tests/probes/hostile_round3.py`; raw results: `$EFA_PROBES/results.json`.",
         "Classification: OK-clear-error (the error names what/where), OK-works (result "
         "verified by a check), UNHELPFUL-crash (bare KeyError/TypeError/..., or an error that "
         "does not say what/where), SILENT-WRONG (wrong, degenerate or non-finite result, or "
         "invalid input accepted, with no error), SECURITY.", "",
         "| area | probes | OK-clear-error | OK-works | unhelpful crash | silent wrong | security |",
         "|---|---|---|---|---|---|---|"]
tot = Counter()
for a in areas:
    n = sum(c[a].values())
    tot += c[a]
    lines.append(f"| {a} | {n} | " + " | ".join(str(c[a][o]) for o in OUT) + " |")
lines.append(f"| **total** | **{len(P)}** | " + " | ".join(f"**{tot[o]}**" for o in OUT) + " |")
lines += ["", "## Non-OK findings", ""]
for outcome in ("SECURITY", "SILENT-WRONG", "UNHELPFUL-crash"):
    rows = [p for p in P if p["outcome"] == outcome]
    lines += [f"### {outcome} ({len(rows)})", ""]
    if not rows:
        lines += ["None.", ""]
        continue
    for p in rows:
        should, fix = p["should"], p["fix"]
        if p["id"] in OVR:
            s2, f2 = OVR[p["id"]]
            should, fix = should or s2, fix or f2
        if not should:
            should = f"an error naming {', '.join(p['needles'])}" if p["needles"] else "see call"
        what = (p.get("error") or p.get("detail") or "").replace("\n", " ").replace("|", "\\|")
        lines += [f"- **{p['id']}** `{p['call']}`",
                  f"  - happened: {what[:400]}",
                  f"  - should: {should}",
                  f"  - fix: {fix or '?'}"]
    lines.append("")
open(BASE / "summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:30]))
missing = [p["id"] for p in P if p["outcome"] in ("SILENT-WRONG", "UNHELPFUL-crash") and not (p["fix"] or p["id"] in OVR)]
print("missing fix:", missing)
