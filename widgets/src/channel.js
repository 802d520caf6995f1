// One message channel per view (widgets/README.md): a snapshot asked for at render, then ordered,
// de-duplicated ops; a message over 600 bytes comes deflated in a binary buffer.

async function inflate(buffer) {
  const bytes = buffer instanceof DataView ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)
    : new Uint8Array(buffer.buffer || buffer);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return await new Response(stream).text();
}

export class Channel {
  constructor(model, apply) {
    this.model = model;
    this.apply = apply;
    this.seq = -1;
    this.rid = Math.random().toString(36).slice(2);
    this.chain = Promise.resolve();
    this.onmsg = (msg, buffers) => {
      this.chain = this.chain.then(async () => {
        const m = msg && msg.z ? JSON.parse(await inflate(buffers[0])) : msg;
        this.receive(m);
      }).catch((e) => console.error("escouade view:", e));
    };
    model.on("msg:custom", this.onmsg);
    this.ask();
  }
  ask() { this.send({ k: "snap?", rid: this.rid }); }
  receive(m) {
    if (!m) return;
    if (m.k === "snap") {
      if (m.rid !== this.rid && this.seq >= 0) return; // another view's catch-up
      this.seq = m.seq;
      this.apply({ snap: m.state });
    } else if (m.k === "ops") {
      if (this.seq < 0 || m.seq <= this.seq) return; // before our snapshot, or already in it
      if (m.seq > this.seq + 1) { this.seq = -1; this.ask(); return; } // a gap: catch up
      this.seq = m.seq;
      this.apply({ ops: m.ops });
    }
  }
  send(content) {
    if (this.closed) return;
    try { this.model.send(content); } catch (e) { this.failed = true; if (this.onfail) this.onfail(e); }
  }
  close() { this.closed = true; this.model.off("msg:custom", this.onmsg); }
}

// What a view drawn whole from one state applies (the squad, comparison, sessions and update views): a
// snapshot's state, or the last `op` of a batch of ops (its state whole), else undefined.
export function latest(m, op) {
  return m.snap || (m.ops || []).filter((o) => o[0] === op).map((o) => o[1]).pop();
}
