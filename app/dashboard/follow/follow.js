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
  // its first render message, the frame showing the elements before it has been drawn. A page's
  // sentinels answer one at a time, each once the one before it has left the page (its fragment has
  // redrawn): answers closer than the page's widget batch (a busy main thread runs their timers
  // together) rerun one fragment of the batch only, and the others waited for their retell (Compare,
  // 3 sentinels: its charts came 9-13 s after the picker, against 4-6 s with one answer for all).
  // A sentinel still in the page after RETELL_MS answers again.
  function afterPaint() {
    let queue = null;
    const me = (() => { try { return window.frameElement; } catch (e) { return null; } })();
    try { queue = me && (window.parent.__admmPainted = window.parent.__admmPainted || []); } catch (e) { queue = null; }
    if (queue) queue.push(me);
    requestAnimationFrame(() => requestAnimationFrame(function turn() {
      if (queue) {
        while (queue.length && !queue[0].isConnected) queue.shift();
        if (queue[0] !== me) { setTimeout(turn, 50); return; }
      }
      setValue("painted");
      setTimeout(turn, RETELL_MS);
    }));
  }

  root.AdmmFollow = {tell, base, send, afterPaint};
})(typeof self !== "undefined" ? self : this);
