"""Helpers of the Streamlit dashboard that need no Streamlit (tests import them directly): the
Train form (:mod:`.form`), worker processes (:mod:`.workers`), figures (:mod:`.charts`), faces
(:mod:`.faces`). The dashboard holds no training math: configs, validation, training and run
directories all come from :mod:`admm_core`.
"""
