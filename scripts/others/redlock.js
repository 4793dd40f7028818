// node-redlock (npm `redlock` 4.x on `ioredis`) under the workloads of
// examples/bench and examples/contention, for scripts/bench-others.sh.
// Each client with its defaults (node-redlock: 10 retries, 200 ms apart,
// up to 200 ms of jitter; TTL 10 s here as quorlock's bench uses).
//
//   node redlock.js latency SECONDS URL...     sequential lock + unlock
//   node redlock.js throughput SECONDS URL...  64 loops at once
//   node redlock.js contend SECONDS TASKS CHECKER_URL URL...
//       TASKS loops on one resource; the holder INCRs `holders` on the
//       checker (it must read 1), waits 1 ms, DECRs. Prints
//       "acquired failed overlaps".
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

const TTL = 10000;
const [mode, secondsArg, ...rest] = process.argv.slice(2);
const seconds = Number(secondsArg);

function client(urls) {
  const nodes = urls.map((url) => new Redis(url, { lazyConnect: false }));
  return { nodes, redlock: new Redlock(nodes) };
}

function close(c) {
  c.nodes.forEach((node) => node.disconnect());
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function latency(urls) {
  const c = client(urls);
  const stop = Date.now() + seconds * 1000;
  const took = [];
  for (let n = 0; Date.now() < stop; n++) {
    const start = process.hrtime.bigint();
    const lock = await c.redlock.lock(`others:latency:${process.pid}:${n}`, TTL);
    await lock.unlock();
    took.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  took.sort((a, b) => a - b);
  console.log(`latency ${percentile(took, 50).toFixed(3)} ${percentile(took, 99).toFixed(3)} ms ` +
    `${(took.length / seconds).toFixed(1)} cycles/s`);
  close(c);
}

async function throughput(urls) {
  const c = client(urls);
  const stop = Date.now() + seconds * 1000;
  let cycles = 0;
  const loops = Array.from({ length: 64 }, async (_, task) => {
    for (let n = 0; Date.now() < stop; n++) {
      const lock = await c.redlock.lock(`others:throughput:${process.pid}:${task}:${n}`, TTL);
      await lock.unlock();
      cycles++;
    }
  });
  const started = Date.now();
  await Promise.all(loops);
  console.log(`throughput ${(cycles / ((Date.now() - started) / 1000)).toFixed(1)} cycles/s`);
  close(c);
}

async function contend(tasks, checkerUrl, urls) {
  const c = client(urls);
  const checker = new Redis(checkerUrl);
  const stop = Date.now() + seconds * 1000;
  let acquired = 0, failed = 0, overlaps = 0;
  const loops = Array.from({ length: tasks }, async () => {
    while (Date.now() < stop) {
      let lock;
      try {
        lock = await c.redlock.lock('others:contended', TTL);
      } catch (err) {
        failed++;
        continue;
      }
      if ((await checker.incr('holders')) !== 1) overlaps++;
      await new Promise((resolve) => setTimeout(resolve, 1));
      await checker.decr('holders');
      acquired++;
      await lock.unlock().catch(() => {});
    }
  });
  await Promise.all(loops);
  console.log(`${acquired} ${failed} ${overlaps}`);
  checker.disconnect();
  close(c);
}

(async () => {
  if (mode === 'latency') await latency(rest);
  else if (mode === 'throughput') await throughput(rest);
  else if (mode === 'contend') await contend(Number(rest[0]), rest[1], rest.slice(2));
  else throw new Error(`unknown mode ${mode}`);
})().catch((err) => {
  console.error(`redlock.js: ${err}`);
  process.exit(1);
});
