// dsh_orchestra relay: a runtime plugin mounted by patch.yml (see docs/approvals.md).
//
// The runtime decides approvals (sandbox escalations, tool-level asks) through its
// `approval/request` waterfall and user questions (the ask_user_question tool) through its
// `user-questions/request` waterfall; with the sdk profile nobody answers either. This plugin
// answers both by asking the orchestrator that launched the runtime, and switches delegated
// children, which the runtime pins to approval policy "never", back to "ask" so that their
// escalations reach the same policy.
//
// Wire, one Unix-socket connection per request, one JSON line each way:
//   approval:  {"v":1,"kind":"approval","sessionId","toolName","callId","reason"}
//              -> {"outcome":"allowed-once"|"rejected"|"cancelled"}
//   question:  {"v":1,"kind":"question","sessionId","questions":[...]}
//              -> {"answers":[{id,selected,custom?}]} | {"cancelled":true} | {"error":"..."}
// Fail closed: a refused connection, an error, an early close or a reply that is not one of
// these (or longer than MAX_REPLY) gives "unavailable" (the tool is denied), or fails the
// question (the tool errors, PROVIDER_ERROR). When the runtime aborts a request (its signal),
// the connection is closed; the orchestrator sees the close and never answers late.
import net from 'node:net';

export const name = 'dsh-orchestra-relay';

const OUTCOMES = new Set(['allowed-once', 'rejected', 'cancelled']);
const MAX_REPLY = 1024 * 1024;

export function apply(ctx, config = {}) {
  const socketPath = config.socket;
  if (typeof socketPath !== 'string' || socketPath === '') return; // not launched with the relay
  const features = new Set(String(config.features ?? 'approvals').split(',').filter(Boolean));
  // The values are in our config now; the commands the runtime starts need not inherit them.
  delete process.env.DSH_ORCHESTRA_APPROVAL_SOCKET;
  delete process.env.DSH_ORCHESTRA_RELAY_FEATURES;
  if (features.has('approvals')) {
    ctx.on('approval/request', (request) => askApproval(socketPath, request));
  }
  if (features.has('subagents')) {
    ctx.on('agent/created', (payload) => unpinDelegated(payload?.agent));
  }
  if (features.has('questions')) {
    ctx.on('user-questions/request', (request) => askQuestions(socketPath, request));
  }
}

// A delegated child starts with `approval/policy {policy: "never", source: "delegation"}` as
// its newest policy event (written during its creation); a later switch wins, so appending
// "ask" here (after creation, before its first step) lets its requests reach the waterfall.
function unpinDelegated(agent) {
  const session = agent?.session;
  if (session === undefined || typeof session.eventAt !== 'function') return;
  for (let seq = session.seq - 1; seq >= 0; seq -= 1) {
    const event = session.eventAt(seq);
    if (event?.type !== 'approval/policy') continue;
    if (event.data?.policy === 'never' && event.data?.source === 'delegation') {
      session.append('approval/policy', { policy: 'ask' });
    }
    return;
  }
}

function askApproval(socketPath, request) {
  const frame = {
    v: 1,
    kind: 'approval',
    sessionId: request.agent?.session?.id ?? null,
    toolName: request.toolName ?? null,
    callId: request.callId ?? null,
    reason: request.reason ?? null,
  };
  return exchange(socketPath, frame, request.signal).then((reply) => {
    if (reply === ABORTED) return 'cancelled';
    return reply !== null && OUTCOMES.has(reply.outcome) ? reply.outcome : 'unavailable';
  });
}

function questionError(message, code) {
  const error = new Error(message);
  error.name = 'UserQuestionError'; // the runtime restores this shape into its own error class
  error.code = code;
  return error;
}

function askQuestions(socketPath, request) {
  const frame = {
    v: 1,
    kind: 'question',
    sessionId: request.agent?.session?.id ?? null,
    questions: request.questions ?? [],
  };
  return exchange(socketPath, frame, request.signal).then((reply) => {
    if (reply === ABORTED) throw questionError('ask_user_question was aborted before the user answered', 'ASK_ABORTED');
    if (reply !== null && Array.isArray(reply.answers)) return { answers: reply.answers };
    if (reply !== null && reply.cancelled === true) throw questionError('the user cancelled ask_user_question', 'ASK_CANCELLED');
    const why = reply !== null && typeof reply.error === 'string' ? reply.error : 'the orchestrator gave no answer';
    throw questionError(`dsh_orchestra answerer: ${why}`, 'PROVIDER_ERROR');
  });
}

const ABORTED = Symbol('aborted');

// One connection: send `frame`, resolve with the parsed reply line, null on any failure, or
// ABORTED when `signal` fires first (the connection is closed then).
function exchange(socketPath, frame, signal) {
  if (signal?.aborted) return Promise.resolve(ABORTED);
  return new Promise((resolve) => {
    let settled = false;
    let buffer = '';
    const socket = net.createConnection(socketPath);
    const settle = (value) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve(value);
    };
    const onAbort = () => settle(ABORTED);
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(JSON.stringify(frame) + '\n'));
    socket.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end < 0) {
        if (buffer.length > MAX_REPLY) settle(null);
        return;
      }
      let reply = null;
      try {
        reply = JSON.parse(buffer.slice(0, end));
      } catch {
        // not JSON: fail closed
      }
      settle(reply !== null && typeof reply === 'object' && !Array.isArray(reply) ? reply : null);
    });
    socket.on('error', () => settle(null));
    socket.on('close', () => settle(null));
  });
}
