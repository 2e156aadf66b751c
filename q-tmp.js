const { Pool } = require('pg');
(async () => { const p = new Pool({ connectionString: 'postgres://postgres:postgres@127.0.0.1:37753/postgres', max: 1 });
 const r = await p.query("SELECT step, metrics->>'reward_mean' AS r, metrics->>'eval_accuracy' AS a FROM train_steps WHERE status='applied' ORDER BY step"); console.log(r.rows.map(x=>`${x.step}:${(+x.r).toFixed(3)}${x.a?'/'+x.a:''}`).join(' ')); await p.end(); })().catch(e=>console.log(e.message));
