"""Heatmaps: NMF score maps of a DeepFacto run over LFW faces or an uploaded photo.

DeepFacto runs are those whose config.json has a "deepfacto" key or whose preset starts
with "lfwa". The score maps come from ``admm_core.heatmaps.heatmaps(run_dir, image, components)``
(one image, a path or (H, W, 3) uint8 -> a list of (H, W) maps, one per component, upsampled to
the image).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from admm_core import heatmaps as hm
from admm_core.errors import ConfigError, DataError, ImageError
from app import ui
from app.dashboard import faces

ss = st.session_state
st.title("Heatmaps")
st.caption(
    "DeepFacto factors a block's output as Z ≈ M·S with M, S ≥ 0; each row of S is a score map. "
    "Here they are upsampled and laid over the face."
)


def is_deepfacto(cfg: dict) -> bool:
    return bool(cfg) and ("deepfacto" in cfg or str(cfg.get("preset") or "").startswith("lfwa"))


@st.cache_data(show_spinner="Reading the run's identity split…")
def held_out_people(run_dir: str) -> dict[str, list[str]]:
    """{person: image paths} of the run's test identities (deepfacto.test_people: the run's own split)."""
    from admm_core.deepfacto import test_people

    return {p: [str(f) for f in files] for p, files in test_people(run_dir).items()}


runs = [r for r in ui.list_runs() if is_deepfacto(r["config"] or {})]
if not runs:
    st.info("No DeepFacto runs yet — train one with `python -m admm_core train --preset lfwa-deepfacto`.")
    st.stop()


by_id = {r["name"]: r for r in runs}
watched = ui.watched()
if watched in by_id and (ss.get("hm_run") not in by_id or ss.get("hm_followed") != watched):
    ss["hm_run"] = watched  # a run newly picked elsewhere (Train, Runs, ?run=) opens here
    ss["hm_followed"] = watched
name = st.selectbox("DeepFacto run", list(by_id), key="hm_run", format_func=lambda n: ui.run_label(by_id[n]))
run = next(r for r in runs if r["name"] == name)

source = st.radio("Face", ["LFW test faces", "Upload a photo"], horizontal=True, key="hm_source")
face = None
if source == "LFW test faces":
    try:  # the run's own held-out people: its identity split of the labelled people (admm_core.deepfacto)
        held = held_out_people(str(run["dir"]))
    except (OSError, ConfigError, DataError, KeyError, ValueError) as e:  # no LFW labels, an unreadable config
        held = {}
        st.warning(f"Cannot list this run's held-out people: {type(e).__name__}: {e}")
    if held:
        people = sorted(held)
        c = st.columns([2, 1])
        person = c[0].selectbox(f"Person ({len(people)} held out of this run's training)", people, key="hm_person")
        images = [Path(f) for f in held[person]]
        idx = c[1].number_input("Image", min_value=1, max_value=max(1, len(images)), value=1, key="hm_idx") - 1
        if images:
            try:
                face = faces.read_image(images[int(idx)].read_bytes())
            except (faces.UploadError, OSError) as e:
                st.error(f"{images[int(idx)].name}: {e}")
else:
    up = st.file_uploader("Your photo (JPEG or PNG)", key="hm_upload")
    if up is not None:
        try:
            face, box, whole = faces.face_from_upload(up.getvalue())
            c = st.columns(2)
            c[0].image(whole, caption=f"face found at x={box[0]}, y={box[1]}, {box[2]}×{box[3]}", width=240)
            c[1].image(face, caption="cropped to 160×160", width=160)
        except faces.UploadError as e:
            st.error(str(e))

if face is None:
    st.stop()

try:
    model = hm.load_model(run["dir"])
    rank = len(model.scale)
    default = hm.default_components(run["dir"], min(4, rank))
except (OSError, ConfigError, DataError, KeyError, ValueError, RuntimeError) as e:
    # no checkpoint yet (still running), or an older run's checkpoint torch cannot map
    st.image(face, width=200)
    st.warning(f"This run has no usable DeepFacto model yet: {e}")
    st.stop()
c = st.columns([3, 1])
comps = c[0].multiselect(
    f"Components (NMF rank r = {rank}; default: the most used)", list(range(rank)), default=default, key="hm_comps"
)
# the slider's value outlives the runs where it is not drawn (no face yet, other source)
ss["hm_opacity"] = ss.get("hm_opacity_keep", 0.5)
opacity = c[1].slider(
    "Overlay opacity",
    0.0,
    1.0,
    step=0.05,
    key="hm_opacity",
    on_change=lambda: ss.update(hm_opacity_keep=ss["hm_opacity"]),
)
if not comps:
    st.info("Pick at least one component.")
    st.stop()
try:
    crop = hm.crop_image(run["dir"], face)
    maps = hm.heatmaps(run["dir"], face, comps)
except (ImageError, ConfigError, ValueError, OSError, RuntimeError) as e:  # say so, no traceback
    st.error(f"Could not compute score maps for this run: {type(e).__name__}: {e}")
    st.stop()
st.plotly_chart(
    faces.overlay_figure(crop, maps, [f"S[{k}]" for k in comps], opacity), key="hm_fig", config=ui.PLOTLY_CONFIG
)
st.caption("Each map is one row of S (the NMF scores of the block's output), bilinearly upsampled to the face.")
