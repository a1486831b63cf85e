// lockapi dashboard: TTL countdowns, refreshes of the server-rendered
// fragments, and the live event feed. No dependencies, no inline script
// (the Content-Security-Policy forbids it). Every feature is optional: a
// page without its element, or a server without events, leaves it idle.
'use strict';

(function () {
  const REFRESH_MS = 500;
  const FEED_MAX = 50;
  const EVENT_TYPES = ['granted', 'reentered', 'renewed', 'released', 'expired', 'force_released', 'updated'];

  // Same format as the server's: "k=v, k=v" in key order; {} shows as such.
  function formatMetadata(md) {
    const keys = Object.keys(md).sort();
    if (keys.length === 0) return '{}';
    return keys.map(function (k) { return k + '=' + md[k]; }).join(', ');
  }

  // Same format as the server's "seconds" template function.
  function formatTTL(ms) {
    const s = Math.max(0, ms) / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  }

  // Countdowns: each .ttl[data-ms] counts down from when it appeared, on
  // the browser's clock (expires_in, not expires_at: clocks disagree).
  const deadlines = new WeakMap();
  function tick() {
    const now = performance.now();
    for (const el of document.querySelectorAll('.ttl[data-ms]')) {
      if (!deadlines.has(el)) deadlines.set(el, now + Number(el.dataset.ms));
      el.textContent = formatTTL(deadlines.get(el) - now);
    }
  }
  setInterval(tick, 100);
  tick();

  function signIn() {
    location.assign('/ui/signin?next=' + encodeURIComponent(location.pathname + location.search));
  }

  // Refreshes: an element with data-refresh asks that URL for its new
  // content every REFRESH_MS, saying which version it shows; the server
  // answers 204 while nothing changed.
  for (const el of document.querySelectorAll('[data-refresh]')) {
    let version = el.dataset.version || '';
    const poll = async function () {
      try {
        const url = new URL(el.dataset.refresh, location.href);
        url.searchParams.set('since', version);
        const r = await fetch(url, { cache: 'no-store', credentials: 'same-origin' });
        if (r.status === 401) return signIn();
        if (r.status === 200) {
          el.innerHTML = await r.text();
          version = r.headers.get('X-UI-Version') || '';
          tick();
        }
      } catch (e) {
        // The server is away for now: try again.
      }
      setTimeout(poll, REFRESH_MS);
    };
    setTimeout(poll, REFRESH_MS);
  }

  // The live feed: GET /ui/events (the API's /v1/events for this session)
  // through EventSource, newest first, continuing after the newest event
  // the page was rendered with.
  const feed = document.getElementById('feed');
  if (!feed || !window.EventSource) return;
  const list = feed.querySelector('ol.events');
  const status = feed.querySelector('.status');
  const say = function (text) { if (status) status.textContent = text; };

  function render(ev) {
    const li = document.createElement('li');
    li.dataset.id = ev.id;
    li.dataset.type = ev.type;
    li.dataset.lock = ev.lock;
    const add = function (tag, cls, text) {
      const el = document.createElement(tag);
      if (cls) el.className = cls;
      el.textContent = text;
      li.append(el, ' ');
      return el;
    };
    add('time', '', (ev.time || '').replace('T', ' '));
    add('span', 'type', ev.type);
    add('a', '', ev.lock).href = '/ui/locks/' + encodeURIComponent(ev.lock);
    add('span', 'owner', ev.owner || '');
    add('span', 'token', '#' + ev.fencing_token);
    if (ev.principal) add('span', 'principal', 'by ' + ev.principal);
    if (ev.metadata) add('span', 'metadata', formatMetadata(ev.metadata));
    return li;
  }

  function onEvent(msg) {
    let ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    if (!ev || !ev.id || list.querySelector('li[data-id="' + CSS.escape(ev.id) + '"]')) return;
    list.prepend(render(ev));
    while (list.children.length > FEED_MAX) list.lastElementChild.remove();
  }

  function connect(after, retried) {
    const url = new URL('/ui/events', location.href);
    if (feed.dataset.lock) url.searchParams.set('lock', feed.dataset.lock);
    else if (feed.dataset.prefix) url.searchParams.set('prefix', feed.dataset.prefix);
    if (after) url.searchParams.set('after', after);
    const es = new EventSource(url);
    say('connecting…');
    es.onopen = function () { say('live'); };
    es.onerror = function () {
      if (es.readyState !== EventSource.CLOSED) { say('reconnecting…'); return; }
      // Closed for good: no stream here (404, 501), not signed in, or a
      // resume point the log no longer keeps (410), which a fresh start
      // without one cures.
      if (after && !retried) { connect('', true); return; }
      say('live events unavailable');
    };
    for (const type of EVENT_TYPES) es.addEventListener(type, onEvent);
  }
  connect(feed.dataset.after, false);
})();
