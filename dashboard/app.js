// The Relax dashboard (docs/monitoring.md): plain browser JavaScript over the control API's reads,
// charts by Chart.js (served from the chart.js package at /dashboard/chart.js), polled every
// `?every=` seconds (default 2). No build step. window.relaxDashboard exposes the charts, the event
// list's items and the number of updates, for tests and for poking at in the console.
'use strict';
(function () {
  const params = new URLSearchParams(location.search);
  const everyMs = Math.max(500, Number(params.get('every') || 2) * 1000);
  let runId = params.get('run');
  let lastEvent = 0;
  const state = { charts: {}, updates: 0, runId, feed: new Map() };
  window.relaxDashboard = state;

  const $ = (id) => document.getElementById(id);
  const getJson = async (url) => {
    const res = await fetch(url);
    if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
    return res.json();
  };
  const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  const COLORS = ['#3366cc', '#dc7633', '#2e8b57', '#8e44ad', '#c0392b', '#16a085'];

  /**
   * The run's state as a person reads it, as client/visibility.ts's runState: failed / terminated /
   * timed_out when Temporal ended it so (its RelaxStatus search attribute then still says where it
   * was, e.g. "starting"), else the run's own status.
   */
  function runState(r) {
    const closedBadly = { FAILED: 'failed', TERMINATED: 'terminated', TIMED_OUT: 'timed_out' };
    return closedBadly[r.workflowStatus] || r.status || r.summary?.status || r.progress?.status || String(r.workflowStatus || '-').toLowerCase();
  }

  // An empty chart says so instead of staying blank (a run with no evaluation yet, a config without KL).
  Chart.register({
    id: 'emptyNote',
    afterDraw(chart, _args, opts) {
      if (chart.data.datasets.some((d) => d.data.length)) return;
      const { ctx, chartArea: a } = chart;
      if (!a) return;
      ctx.save();
      ctx.fillStyle = '#8a93a6';
      ctx.textAlign = 'center';
      ctx.font = '13px system-ui, sans-serif';
      ctx.fillText(opts.text || 'no points yet', (a.left + a.right) / 2, (a.top + a.bottom) / 2);
      ctx.restore();
    },
  });

  // A dataset of one point (a run's first evaluation) is drawn as a dot: a line needs two.
  const pointRadius = (base) => (ctx) => (ctx.dataset.data.length <= 1 ? 3 : base);
  const dataset = (label, i, points) => ({ label, data: [], borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length], pointRadius: pointRadius(points), borderWidth: 1.5 });
  const line = (id, labels, { points = 0, empty } = {}) => {
    state.charts[id] = new Chart($(`chart-${id}`), {
      type: 'line',
      data: { datasets: labels.map((label, i) => dataset(label, i, points)) },
      options: { animation: false, parsing: false, scales: { x: { type: 'linear', title: { display: true, text: 'step' } } }, plugins: { legend: { display: labels.length > 1 }, emptyNote: { text: empty } } },
    });
    state.charts[id].$points = points;
  };
  line('reward', ['reward_mean']);
  line('accuracy', ['eval_accuracy'], { points: 2, empty: 'no held-out evaluation yet (every train.eval_every steps)' });
  line('loss', ['loss']);
  line('kl', ['kl']);
  line('entropy', ['entropy']);
  line('grad_norm', ['grad_norm']);
  line('samples_per_s', ['samples_per_s']);
  line('idle', ['train_wait_ms', 'rollout_wait_ms']);
  state.charts.staleness = new Chart($('chart-staleness'), { type: 'bar', data: { labels: [], datasets: [{ label: 'samples', data: [], backgroundColor: '#3366cc' }] }, options: { animation: false, plugins: { legend: { display: false } } } });
  state.charts.timeline = new Chart($('chart-timeline'), {
    type: 'bar',
    data: { labels: [], datasets: [] },
    options: { animation: false, indexAxis: 'y', scales: { x: { type: 'linear', title: { display: true, text: 'seconds ago' } }, y: { stacked: true } }, plugins: { legend: { position: 'bottom' } } },
  });

  /** The held-out series: eval_accuracy first, then the task's own eval_* metrics and any other *accuracy series. */
  const accuracySeries = (series) => ['eval_accuracy', ...Object.keys(series).filter((n) => n !== 'eval_accuracy' && (n.startsWith('eval_') || n.endsWith('accuracy'))).sort()];

  const setSeries = (chart, series, labels) => {
    if (labels && labels.join() !== chart.data.datasets.map((d) => d.label).join()) {
      chart.data.datasets = labels.map((label, i) => dataset(label, i, chart.$points));
      chart.options.plugins.legend.display = labels.length > 1;
    }
    chart.data.datasets.forEach((d) => (d.data = (series[d.label] || []).map(([x, y]) => ({ x, y }))));
    chart.update();
  };

  async function listRuns() {
    const { runs } = await getJson('/runs?limit=50');
    if (!runId && runs.length) runId = runs[0].runId;
    state.runId = runId;
    $('runs').innerHTML = '';
    for (const r of runs) {
      const a = document.createElement('a');
      a.href = `?run=${encodeURIComponent(r.runId)}`;
      a.className = r.runId === runId ? 'selected' : '';
      const s = runState(r);
      a.innerHTML = `${escapeHtml(r.runId)}<br><small class="${s === 'failed' ? 'bad' : ''}">${escapeHtml(s)} · step ${r.step ?? '-'}</small>`;
      $('runs').appendChild(a);
    }
  }

  function staleness(series) {
    const byAge = Object.entries(series)
      .filter(([name]) => name.startsWith('staleness_hist_'))
      .map(([name, points]) => [Number(name.slice('staleness_hist_'.length)), points.reduce((a, [, v]) => a + v, 0)])
      .sort((a, b) => a[0] - b[0]);
    const chart = state.charts.staleness;
    chart.data.labels = byAge.map(([d]) => `${d} behind`);
    chart.data.datasets[0].data = byAge.map(([, n]) => n);
    chart.update();
  }

  function timeline(spans) {
    const now = Date.now();
    const roles = [...new Set(spans.map((s) => s.role))];
    const stages = [...new Set(spans.map((s) => s.stage))];
    const chart = state.charts.timeline;
    chart.data.labels = roles;
    chart.data.datasets = stages.map((stage, i) => ({
      label: stage,
      backgroundColor: COLORS[i % COLORS.length],
      data: spans.filter((s) => s.stage === stage).map((s) => ({ y: s.role, x: [(Date.parse(s.startedAt) - now) / 1000, (Date.parse(s.endedAt) - now) / 1000] })),
    }));
    chart.update();
  }

  /** GET /dashboard/health answers 200 on every stack: started: false where no health manager ever ran. */
  async function health() {
    const h = await getJson('/dashboard/health');
    if (!h.started) {
      $('health').textContent = 'no health manager on this stack (POST /health/manager starts one)';
      return;
    }
    const stopped = h.execution && h.execution !== 'RUNNING' ? `<span class="bad">stopped (${escapeHtml(h.execution)}); its last view:</span> ` : '';
    const problems = h.open.length ? `<span class="bad">open: ${escapeHtml(h.open.join(', '))}</span>` : '<span class="ok">no open problem</span>';
    const roles = (h.last_report?.roles || []).map((r) => `<tr><td>${escapeHtml(r.role)}</td><td class="${r.up < r.slots ? 'bad' : 'ok'}">${r.up}/${r.slots} up</td></tr>`).join('');
    const actions = h.actions.slice(-5).map((a) => `<tr><td>${a.at.slice(11, 19)}</td><td>${escapeHtml(a.action)} ${escapeHtml(a.target || '')}</td></tr>`).join('');
    $('health').innerHTML = `${stopped}${problems}<table>${roles}${actions}</table>`;
  }

  // ---- The event list: the run's events, steps, evaluations, checkpoints, engines and failure as one feed.

  /** Adds (or replaces) one feed item; `noisy` ones show only with "all events" ticked. */
  const feed = (key, at, kind, text, noisy = false) => {
    if (Number.isFinite(at)) state.feed.set(key, { at, kind, text, noisy });
  };
  const pct = (v) => (v === undefined ? '?' : `${(v * 100).toFixed(1)}%`);
  const detailText = (kind, d) => {
    if (kind === 'activity_started') return `${d.activity || 'activity'}${d.step !== undefined ? ` step ${d.step}` : ''}`;
    if (kind === 'step_skipped') return `step ${d.step} skipped: ${d.reason || ''}`;
    if (kind === 'hyperparameters_set') return `from step ${d.step}: ${(d.changed || []).join(', ')}`;
    if (kind === 'run_finished') return `status ${d.status || '-'}`;
    if (kind === 'warm_start') return d.accuracy !== undefined ? `held-out ${pct(d.accuracy)} after SFT` : '';
    return '';
  };

  async function runEvents() {
    const { events } = await getJson(`/runs/${encodeURIComponent(runId)}/events?after=${lastEvent}&limit=1000`);
    for (const e of events) {
      lastEvent = e.id;
      const d = e.detail || {};
      feed(`e${e.id}`, Date.parse(e.createdAt), e.kind, `${detailText(e.kind, d)}${e.role ? ` (${e.role})` : ''}`, e.kind === 'activity_started');
    }
  }

  function spanEvents(spans, metrics) {
    const acc = new Map((metrics.eval_accuracy || []).map(([s, v]) => [s, v]));
    for (const s of spans) {
      const at = Date.parse(s.endedAt);
      const ms = Math.round(at - Date.parse(s.startedAt));
      if (s.stage === 'train') feed(`train${s.step}`, at, 'step_completed', `step ${s.step} trained in ${ms} ms on ${s.worker}`);
      else if (s.stage === 'evaluate' && s.step !== null) feed(`eval${s.step}`, at, 'eval', `held-out at step ${s.step}: ${pct(acc.get(s.step))}`);
      else feed(`${s.stage}${s.startedAt}${s.worker}`, at, s.stage, `${s.stage}${s.step !== null ? ` step ${s.step}` : ''} on ${s.worker} (${ms} ms)`, true);
    }
  }

  async function checkpointAndScaleEvents(run) {
    const [{ checkpoints }, { engines }] = await Promise.all([
      getJson(`/dashboard/runs/${encodeURIComponent(runId)}/checkpoints?limit=20`),
      getJson('/rollout/engines?include_removed=true'),
    ]);
    for (const c of checkpoints) feed(`ckpt${c.policyVersion}`, Date.parse(c.createdAt), 'checkpoint_published', `policy v${c.policyVersion} published (step ${c.step})`);
    const since = Date.parse(run.startTime);
    for (const e of engines.filter((x) => !x.initial)) {
      const created = Date.parse(e.created_at);
      if (created >= since) feed(`eng+${e.engine_id}`, created, 'scale_out', `rollout engine ${e.engine_id} added (${e.kind} on ${e.host})`);
      if (['removed', 'failed'].includes(e.state)) feed(`eng-${e.engine_id}`, Date.parse(e.updated_at), e.state === 'failed' ? 'engine_failed' : 'scale_in', `rollout engine ${e.engine_id} ${e.state}`);
    }
    if (run.failure) feed('failure', Date.parse(run.closeTime) || Date.now(), 'run_failed', run.failure.message);
  }

  function renderFeed() {
    const all = $('events-all').checked;
    const rows = [...state.feed.values()].filter((i) => all || !i.noisy).sort((a, b) => b.at - a.at).slice(0, 15);
    state.feedRows = rows.map((i) => i.kind);
    $('events').innerHTML = rows.map((i) => `<tr class="${i.kind === 'run_failed' || i.kind === 'engine_failed' ? 'bad' : ''}"><td>${new Date(i.at).toISOString().slice(11, 19)}</td><td>${escapeHtml(i.kind)}</td><td>${escapeHtml(i.text)}</td></tr>`).join('');
    // Old items beyond what the list can show are dropped, newest kept.
    if (state.feed.size > 2000) [...state.feed.entries()].sort((a, b) => a[1].at - b[1].at).slice(0, state.feed.size - 1000).forEach(([k]) => state.feed.delete(k));
  }
  $('events-all').addEventListener('change', renderFeed);

  function header(run) {
    const s = runState(run);
    $('run-title').textContent = runId;
    $('run-status').textContent = `${s} (${run.workflowStatus})`;
    $('run-status').className = `figure ${s === 'failed' || s === 'terminated' || s === 'timed_out' ? 'bad' : ''}`;
    $('run-failure').textContent = run.failure ? run.failure.message : '';
    const p = run.progress || {};
    $('run-step').textContent = `step ${p.step ?? run.step ?? '-'} / ${p.totalSteps ?? '-'} · policy v${p.policyVersion ?? '-'}`;
    $('run-sps').textContent = p.samplesPerSecond ? `${p.samplesPerSecond.toFixed(0)} samples/s` : '';
  }

  async function refresh() {
    try {
      await listRuns();
      if (runId) {
        const [run, { metrics }, { spans }] = await Promise.all([
          getJson(`/runs/${encodeURIComponent(runId)}`),
          getJson(`/runs/${encodeURIComponent(runId)}/metrics`),
          getJson(`/runs/${encodeURIComponent(runId)}/spans?limit=120`),
        ]);
        header(run);
        for (const id of ['reward', 'loss', 'kl', 'entropy', 'grad_norm', 'samples_per_s', 'idle']) setSeries(state.charts[id], metrics);
        setSeries(state.charts.accuracy, metrics, accuracySeries(metrics));
        staleness(metrics);
        timeline(spans);
        spanEvents(spans, metrics);
        await Promise.all([runEvents(), checkpointAndScaleEvents(run), health()]);
        renderFeed();
      }
      state.updates++;
      $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      state.lastError = err.message;
      $('updated').textContent = `update failed: ${err.message}`;
    }
    setTimeout(refresh, everyMs);
  }
  refresh();
})();
