// dsh_orchestra approval relay: a runtime plugin mounted by patch.yml (see docs/approvals.md).
//
// The runtime decides every approval (sandbox escalation, tool-level asks) through its
// `approval/request` waterfall; with the sdk profile nobody answers it, so the outcome is
// "unavailable". This plugin answers it by asking the orchestrator that launched the runtime.
//
// Wire, one Unix-socket connection per request:
//   we send     {"v":1,"sessionId":...,"toolName":...,"callId":...,"reason":...}\n
//   we receive  {"outcome":"allowed-once"|"rejected"|"cancelled"}\n
// Fail closed: a refused connection, an error, an early close, a reply that is not one of the
// three outcomes, or a reply longer than MAX_REPLY gives "unavailable" (the tool is denied).
// When the runtime aborts the request (its signal), the connection is closed and the answer
// is "cancelled"; the orchestrator sees the close and never answers late.
import net from 'node:net';

export const name = 'dsh-orchestra-approval-relay';

const OUTCOMES = new Set(['allowed-once', 'rejected', 'cancelled']);
const MAX_REPLY = 64 * 1024;

export function apply(ctx, config = {}) {
  const socketPath = config.socket;
  if (typeof socketPath !== 'string' || socketPath === '') return; // not launched with the relay
  // The path is in our config now; the commands the runtime starts need not inherit it.
  delete process.env.DSH_ORCHESTRA_APPROVAL_SOCKET;
  ctx.on('approval/request', (request) => ask(socketPath, request));
}

function ask(socketPath, request) {
  const signal = request.signal;
  if (signal?.aborted) return Promise.resolve('cancelled');
  const frame = {
    v: 1,
    sessionId: request.agent?.session?.id ?? null,
    toolName: request.toolName ?? null,
    callId: request.callId ?? null,
    reason: request.reason ?? null,
  };
  return new Promise((resolve) => {
    let settled = false;
    let buffer = '';
    const socket = net.createConnection(socketPath);
    const settle = (outcome) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve(outcome);
    };
    const onAbort = () => settle('cancelled');
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(JSON.stringify(frame) + '\n'));
    socket.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end < 0) {
        if (buffer.length > MAX_REPLY) settle('unavailable');
        return;
      }
      let reply = null;
      try {
        reply = JSON.parse(buffer.slice(0, end));
      } catch {
        // not JSON: fall through to unavailable
      }
      settle(reply !== null && OUTCOMES.has(reply.outcome) ? reply.outcome : 'unavailable');
    });
    socket.on('error', () => settle('unavailable'));
    socket.on('close', () => settle('unavailable'));
  });
}
