// How a component tells its page that what it shows changed on disk (app/dashboard/follow.py).
// The page draws a fragment with `drawn`, the stamp of the files it read; the component asks a route
// of the dashboard (app/serve.py) for the stamp now and, when it differs, sets its value: Streamlit
// reruns the fragment the component sits in (a widget's value changed), and the new drawing hands the
// component the new `drawn`. Nothing pushes reruns from the server. Shared by the follow component
// (index.html beside this file) and the live charts' page (app/dashboard/live_charts.html).
"use strict";
(function (root) {
  const RETELL_MS = 5000;  // a change told but not redrawn by then is told again
  // Streamlit's page sends the widget changes of one task turn as one rerun, of the first one's
  // fragment only ("Multiple different fragmentIds detected in a single batch"): two components
  // telling at once would rerun one fragment. So the page's components (same origin: they share the
  // parent window) tell at least GAP_MS apart.
  const GAP_MS = 120;
  const send = (type, extra) => window.parent.postMessage(Object.assign({isStreamlitMessage: true, type}, extra), "*");
  let told = null, toldAt = 0, count = 0;

  function spaced(fn) {
    let page = null;
    try { page = window.parent; void page.location.href; } catch (e) { page = null; }  // not same origin: at once
    const now = Date.now(), at = page ? Math.max(now, (page.__admmToldAt || 0) + GAP_MS) : now;
    if (page) page.__admmToldAt = at;
    if (at > now) setTimeout(fn, at - now); else fn();
  }

  function setValue(stamp) {
    count += 1;
    const value = {stamp, count};  // a new value each time: each one is a change
    spaced(() => send("streamlit:setComponentValue", {value, dataType: "json"}));
  }

  // `stamp` from the route against the `drawn` of the page's last drawing: true while they differ
  // (the page has been told, or is told now); false once the page has drawn what the route says.
  function tell(drawn, stamp) {
    if (stamp === drawn) { told = null; return false; }
    const now = Date.now();
    if (told === stamp && now - toldAt < RETELL_MS) return true;
    told = stamp; toldAt = now;
    setValue(stamp);
    return true;
  }

  // The dashboard's root: a component's page is served at <root>/component/<name>/index.html.
  function base() {
    const p = window.location.pathname, i = p.indexOf("/component/");
    return i >= 0 ? p.slice(0, i) : "";
  }

  // Answer once the browser has painted the page around the component: two animation frames after
  // its first render message, the frame showing the elements before it has been drawn. Said again
  // every RETELL_MS until the page draws without the component.
  function afterPaint() {
    requestAnimationFrame(() => requestAnimationFrame(function again() {
      setValue("painted");
      setTimeout(again, RETELL_MS);
    }));
  }

  root.AdmmFollow = {tell, base, send, afterPaint};
})(typeof self !== "undefined" ? self : this);
