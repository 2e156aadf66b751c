const { Pool } = require('pg');
(async () => { const p = new Pool({ connectionString: 'postgres://postgres:postgres@127.0.0.1:37753/postgres', max: 1 });
 const r = await p.query("SELECT step, value FROM metrics WHERE name='eval_accuracy' ORDER BY step"); console.log(r.rows.map(x=>`${x.step}:${(+x.value).toFixed(3)}`).join(' ')); await p.end(); })().catch(e=>console.log(e.message));
