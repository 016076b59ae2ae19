"""Heatmaps: NMF score maps of a DeepFacto model over LFW faces, an uploaded photo or the mean face.

The models: those shipped in assets/models (no data root needed) and the DeepFacto runs. The maps
(``admm_core.heatmaps.heatmaps``: one (H, W) map per component, upsampled to the image) are
computed in the scorer process (:mod:`app.dashboard.scorer`): the server never imports torch.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from admm_core.deepfacto import shipped
from admm_core.errors import CheckpointError, ConfigError, DataError, ImageError
from admm_core.spec.kinds import DEEPFACTO, run_kind
from app import ui
from app.dashboard import faces
from app.dashboard.scorer import scorer

ss = st.session_state
st.title("Heatmaps")
st.caption(
    "DeepFacto factors a block's output as Z ≈ M·S with M, S ≥ 0; each row of S is a score map. "
    "Here they are upsampled and laid over the face."
)


@st.cache_data(show_spinner="Reading the run's identity split…")
def held_out_people(run_dir: str) -> dict[str, list[str]]:
    """{person: image paths} of the run's own test identities."""
    from admm_core.deepfacto.heldout import test_people  # no torch: the network is the scorer's

    return {p: [str(f) for f in files] for p, files in test_people(run_dir).items()}


def lfw_problem() -> str | None:
    """None when LFW can be found, else why not (a few stat calls)."""
    from admm_core.spec.faces import find_lfw

    try:
        find_lfw()
    except (DataError, OSError) as e:
        return str(e)
    return None


@st.cache_data(show_spinner=False)
def shipped_models(root: str, stamp: float = 0.0) -> list[dict]:
    """The DeepFacto models' manifest entries of ``root`` (``stamp``: the manifest's mtime)."""
    try:
        return shipped.entries("deepfacto", Path(root))
    except CheckpointError as e:
        st.warning(str(e))
        return []


@st.cache_data(show_spinner="Reading the mean training face…")
def mean_face(root: str) -> object:
    return shipped.mean_face(shipped.entries("face-backbone", Path(root))[0]["name"], Path(root))


def shipped_label(e: dict) -> str:
    acc = (e.get("metrics") or {}).get("mean_attribute_accuracy")
    tail = f", attributes {100 * acc:.1f}%" if acc is not None else ""
    return f"shipped · DeepFacto r = {e['config']['rank']} (LFW{tail})"


# the shipped models first: a new checkout has them and nothing else
models_root = str(shipped.models_dir())
manifest = Path(models_root) / shipped.MANIFEST
stamp = manifest.stat().st_mtime if manifest.is_file() else 0.0
models = {f"shipped:{e['name']}": shipped_label(e) for e in shipped_models(models_root, stamp)}
runs = [r for r in ui.list_runs() if run_kind(r["config"], r.get("status")) == DEEPFACTO]
by_id = {r["name"]: r for r in runs}
models |= {str(r["dir"]): ui.run_label(r) for r in runs}
if not models:
    st.info(
        "No DeepFacto model: the shipped ones are missing (assets/models) and no run has been trained yet — "
        "train one with `python -m admm_core train --preset lfwa-deepfacto`."
    )
    st.stop()

watched = ui.watched()
if watched in by_id and (ss.get("hm_model") not in models or ss.get("hm_followed") != watched):
    ss["hm_model"] = str(by_id[watched]["dir"])  # a run newly picked elsewhere (Train, Runs, ?run=) opens here
    ss["hm_followed"] = watched
if ss.get("hm_model") not in models:
    ss.pop("hm_model", None)
ref = st.selectbox("DeepFacto model", list(models), key="hm_model", format_func=models.get)
is_shipped = shipped.is_shipped(ref)
if is_shipped:
    st.caption(
        "Trained by the project on LFW and shipped with it (assets/models, checksum verified on load). "
        + shipped.DATA_TERMS.split(". ")[-1].strip()
    )

lfw_missing = lfw_problem()
sources = ["LFW test faces", "Upload a photo"] + (["Mean training face"] if shipped_models(models_root, stamp) else [])
if lfw_missing and ss.get("hm_source") is None:
    ss["hm_source"] = "Upload a photo"  # no LFW here: start where a face can come from
source = st.radio("Face", sources, horizontal=True, key="hm_source")
face = None
if source == "LFW test faces":
    held: dict = {}
    if lfw_missing:
        st.warning(f"No LFW here, so no held-out faces to show: {lfw_missing}. Upload a photo instead.")
    else:
        try:  # the model's own held-out people: its identity split of the labelled people (admm_core.deepfacto)
            held = held_out_people(ref)
        except (OSError, ConfigError, DataError, KeyError, ValueError) as e:  # no LFW labels, an unreadable config
            st.warning(f"Cannot list this model's held-out people: {type(e).__name__}: {e}")
    if held:
        people = sorted(held)
        c = st.columns([2, 1])
        person = c[0].selectbox(f"Person ({len(people)} held out of this model's training)", people, key="hm_person")
        images = [Path(f) for f in held[person]]
        label = f"Image (of {len(images)})"
        idx = c[1].number_input(label, min_value=1, max_value=max(1, len(images)), value=1, key=f"hm_idx.{person}")
        if images:
            image = images[int(idx) - 1]
            try:
                face = faces.read_image(image.read_bytes())
            except (faces.UploadError, OSError) as e:
                st.error(f"{image.name}: {e}")
elif source == "Mean training face":
    try:
        face = mean_face(models_root)
        st.caption("The pixel-wise mean of the shipped backbone's training faces (no LFW needed).")
    except (CheckpointError, ConfigError, IndexError) as e:
        st.error(str(e))
else:
    # no `type=` filter: a file of another type reaches the page and gets a message naming it; the
    # widget's own limit is the photo limit, so the browser's refusal says the label's number
    up = st.file_uploader(
        f"Your photo (JPEG or PNG, up to {faces.MAX_UPLOAD_MB} MB)",
        key="hm_upload",
        max_upload_size=faces.MAX_UPLOAD_MB,
    )
    if up is not None:
        try:
            face, box, whole = faces.face_from_upload(faces.upload_bytes(up.name, up.size, up.getvalue))
            c = st.columns(2)
            c[0].image(whole, caption=f"face found at x={box[0]}, y={box[1]}, {box[2]}×{box[3]}", width=240)
            c[1].image(face, caption="cropped to 160×160", width=160)
        except faces.UploadError as e:  # one message, naming the file (the size refusal names it already)
            st.error(str(e) if str(e).startswith(up.name) else f"{up.name}: {e}")

if face is None:
    st.stop()

try:
    rank, order = scorer().info(ref)  # DeepFacto's network runs in the scorer process (app/dashboard/scorer.py)
    default = order[: min(4, rank)]
except (OSError, ConfigError, DataError, CheckpointError, KeyError, ValueError, RuntimeError) as e:
    # no checkpoint yet (still running), a damaged shipped file, or an older run's checkpoint torch cannot map
    st.image(face, width=200)
    st.warning(f"This model cannot be used: {e}" if is_shipped else f"This run has no usable DeepFacto model yet: {e}")
    st.stop()
c = st.columns([3, 1])
# picks per model: switching from r = 4 to r = 32 shows the r = 32 model's most used rows, not r = 4's
comps = c[0].multiselect(
    f"Components (NMF rank r = {rank}; default: the most used)",
    list(range(rank)),
    default=default,
    key=f"hm_comps.{ref}",
    wrap=True,  # r = 32 picks on rows, not a strip scrolled sideways
)
# the value outlives the runs where the slider is not drawn (no face yet, other source)
opacity = c[1].slider("Overlay opacity", 0.0, 1.0, 0.5, step=0.05, key="hm_opacity", persist_state="session")
if not comps:
    st.info("Pick at least one component.")
    st.stop()
try:
    crop, maps = scorer().maps(ref, face, comps)
except (ImageError, ConfigError, ValueError, OSError, RuntimeError) as e:  # say so, no traceback
    st.error(f"Could not compute score maps for this run: {type(e).__name__}: {e}")
    st.stop()
st.plotly_chart(
    faces.overlay_figure(crop, maps, [f"S[{k}]" for k in comps], opacity), key="hm_fig", config=ui.PLOTLY_CONFIG
)
st.caption("Each map is one row of S (the NMF scores of the block's output), bilinearly upsampled to the face.")
