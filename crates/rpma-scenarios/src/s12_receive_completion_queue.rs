//! 12-receive-completion-queue: the ping-pong of 08 with the receives completing on a separate
//! receive CQ (`rcq_size = 10`) on both sides: sends are waited for on the main CQ, receives on
//! the receive CQ. With `shared = true` it is 12scch: both CQs share one completion channel and
//! each side waits with `rpma_conn_wait`, which says which CQ has completions.

use anyhow::{ensure, Result};
use rpma::{ConnCfg, Transport};

use super::s08_messages_ping_pong::{check_exchange, ping, serve, ClientReport, Completions, ServerReport};
use super::{run_pair, side, ClientOpts, DemoEnv, ServerOpts};

/// `RCQ_SIZE`.
pub const RCQ_SIZE: u32 = 10;

fn cfg<T: Transport>(shared: bool) -> (ConnCfg<T>, Completions) {
    let cfg = ConnCfg::new().with_rcq_size(RCQ_SIZE).with_shared_channel(shared);
    (cfg, if shared { Completions::SharedChannel } else { Completions::SeparateRcq })
}

/// The server side (`shared`: one completion channel).
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts, shared: bool) -> Result<ServerReport> {
    let (cfg, mode) = cfg(shared);
    serve(t, o, Some(&cfg), mode)
}

/// The client side (`shared`: one completion channel).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts, shared: bool) -> Result<ClientReport> {
    let (cfg, mode) = cfg(shared);
    ping(t, o, Some(&cfg), mode)
}

/// Both sides in one process.
///
/// # Errors
/// If a side fails or a value is wrong.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv, shared: bool) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let so = env.server();
    let mut co = env.client();
    co.counter = 100;
    co.rounds = 4;
    let (s, c) = run_pair(
        move |ready| server(&ts, &ServerOpts { ready, ..so }, shared),
        vec![Box::new(move || client(&tc, &co, shared))],
    )?;
    check_exchange(&c[0], 4, 100)?;
    ensure!(s.received == c[0].sent && s.sent == c[0].received, "server {s:?} vs client {:?}", c[0]);
    let how =
        if shared { "one shared completion channel (rpma_conn_wait)" } else { "receives on a separate receive CQ" };
    let mut v = vec![format!("both sides: sends on the main CQ, {how}")];
    v.extend([side("server", &s), side("client", &c[0])].concat());
    Ok(v)
}
