// The Relax dashboard (docs/monitoring.md): plain browser JavaScript over the control API's reads,
// charts by Chart.js (served from the chart.js package at /dashboard/chart.js), polled every
// `?every=` seconds (default 2). No build step. window.relaxDashboard exposes the charts and the
// number of updates, for tests and for poking at in the console.
'use strict';
(function () {
  const params = new URLSearchParams(location.search);
  const everyMs = Math.max(500, Number(params.get('every') || 2) * 1000);
  let runId = params.get('run');
  let lastEvent = 0;
  const state = { charts: {}, updates: 0, runId };
  window.relaxDashboard = state;

  const $ = (id) => document.getElementById(id);
  const getJson = async (url) => {
    const res = await fetch(url);
    if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
    return res.json();
  };
  const line = (id, datasets) => {
    state.charts[id] = new Chart($(`chart-${id}`), {
      type: 'line',
      data: { datasets: datasets.map((label, i) => ({ label, data: [], borderColor: ['#3366cc', '#dc7633', '#2e8b57'][i], pointRadius: 0, borderWidth: 1.5 })) },
      options: { animation: false, parsing: false, scales: { x: { type: 'linear', title: { display: true, text: 'step' } } }, plugins: { legend: { display: datasets.length > 1 } } },
    });
  };
  line('reward', ['reward_mean']);
  line('accuracy', ['eval_accuracy']);
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

  const setSeries = (chart, series) => {
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
      a.innerHTML = `${r.runId}<br><small>${r.status || r.workflowStatus} · step ${r.step ?? '-'}</small>`;
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
    const colors = ['#3366cc', '#dc7633', '#2e8b57', '#8e44ad', '#c0392b', '#16a085'];
    const chart = state.charts.timeline;
    chart.data.labels = roles;
    chart.data.datasets = stages.map((stage, i) => ({
      label: stage,
      backgroundColor: colors[i % colors.length],
      data: spans.filter((s) => s.stage === stage).map((s) => ({ y: s.role, x: [(Date.parse(s.startedAt) - now) / 1000, (Date.parse(s.endedAt) - now) / 1000] })),
    }));
    chart.update();
  }

  async function health() {
    try {
      const h = await getJson('/health/status');
      const problems = h.open.length ? `<span class="bad">open: ${h.open.join(', ')}</span>` : '<span class="ok">no open problem</span>';
      const roles = (h.last_report?.roles || []).map((r) => `<tr><td>${r.role}</td><td class="${r.up < r.slots ? 'bad' : 'ok'}">${r.up}/${r.slots} up</td></tr>`).join('');
      const actions = h.actions.slice(-5).map((a) => `<tr><td>${a.at.slice(11, 19)}</td><td>${a.action} ${a.target || ''}</td></tr>`).join('');
      $('health').innerHTML = `${problems}<table>${roles}${actions}</table>`;
    } catch {
      $('health').textContent = 'the health manager is not running (POST /health/manager starts it)';
    }
  }

  async function events() {
    const { events } = await getJson(`/runs/${encodeURIComponent(runId)}/events?after=${lastEvent}&limit=200`);
    const table = $('events');
    for (const e of events) {
      lastEvent = e.id;
      const row = table.insertRow(0);
      row.innerHTML = `<td>${String(e.createdAt).slice(11, 19)}</td><td>${e.kind}</td><td>${e.role || ''}</td>`;
    }
    while (table.rows.length > 15) table.deleteRow(table.rows.length - 1);
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
        $('run-title').textContent = runId;
        $('run-status').textContent = `${run.status || '-'} (${run.workflowStatus})`;
        const p = run.progress || {};
        $('run-step').textContent = `step ${p.step ?? run.step ?? '-'} / ${p.totalSteps ?? '-'} · policy v${p.policyVersion ?? '-'}`;
        $('run-sps').textContent = p.samplesPerSecond ? `${p.samplesPerSecond.toFixed(0)} samples/s` : '';
        for (const id of ['reward', 'accuracy', 'loss', 'kl', 'entropy', 'grad_norm', 'samples_per_s', 'idle']) setSeries(state.charts[id], metrics);
        staleness(metrics);
        timeline(spans);
        await Promise.all([events(), health()]);
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
