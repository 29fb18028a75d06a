//! Logging: thresholds, raw conversions and the replaceable log function
//! (docs/semantics.md#logging, #defaults; docs/decisions.md #20).
//!
//! Logging state is process-global, so every check is in ONE test that restores the defaults
//! at the end.
//!
//! Type-enforced (no case): `get_threshold__*` with a NULL `level` out-pointer; an invalid
//! `threshold` / `level` given to `set_threshold` / `threshold` (typed enums: the raw C values are
//! rejected by `Threshold::try_from` / `LogLevel::try_from`, checked here). `RPMA_E_AGAIN` cannot
//! happen (atomics).
#![allow(non_snake_case, missing_docs)]

use std::sync::{Arc, Mutex};

use rpma::logging::{self, LogLevel, LogRecord, Threshold};
use rpma::mock::MockFabric;
use rpma::{ContextType, Device, Ep, ErrorKind, Peer};

/// One record of the `log` facade: level, target, message, file, line.
type FacadeRecord = (::log::Level, String, String, Option<String>, Option<u32>);

/// A `log` facade logger recording what the default log function forwards.
struct FacadeLogger(Mutex<Vec<FacadeRecord>>);

impl ::log::Log for FacadeLogger {
    fn enabled(&self, _: &::log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &::log::Record<'_>) {
        self.0.lock().unwrap().push((
            r.level(),
            r.target().to_owned(),
            r.args().to_string(),
            r.file().map(str::to_owned),
            r.line(),
        ));
    }
    fn flush(&self) {}
}

static FACADE: FacadeLogger = FacadeLogger(Mutex::new(Vec::new()));

#[derive(Clone, Debug)]
struct Captured {
    level: LogLevel,
    file: &'static str,
    line: u32,
    function: &'static str,
    message: String,
}

const ALL_LEVELS: [LogLevel; 7] = [
    LogLevel::Disabled,
    LogLevel::Fatal,
    LogLevel::Error,
    LogLevel::Warning,
    LogLevel::Notice,
    LogLevel::Info,
    LogLevel::Debug,
];

fn listen(peer: &Peer<MockFabric>, port: u32) -> String {
    let port = port.to_string();
    let ep = Ep::listen(peer, "127.0.0.1", &port).expect("listen");
    ep.shutdown().expect("shutdown");
    format!("Waiting for incoming connection on 127.0.0.1:{port}")
}

fn notices(log: &Mutex<Vec<Captured>>, message: &str) -> Vec<Captured> {
    log.lock().unwrap().iter().filter(|c| c.message == message).cloned().collect()
}

#[test]
fn log__all() {
    // --- defaults (docs/semantics.md#defaults, docs/decisions.md #20): by build type, as librpma ---
    ::log::set_logger(&FACADE).expect("the only logger of this binary");
    ::log::set_max_level(::log::LevelFilter::Trace);

    let (primary, aux) = if cfg!(debug_assertions) {
        (LogLevel::Debug, LogLevel::Warning)
    } else {
        (LogLevel::Warning, LogLevel::Disabled)
    };
    assert_eq!(logging::threshold(Threshold::Primary), primary, "default primary threshold");
    assert_eq!(logging::threshold(Threshold::Aux), aux, "default aux threshold");

    // --- set/get for both thresholds, every level ---
    for t in [Threshold::Primary, Threshold::Aux] {
        for l in ALL_LEVELS {
            logging::set_threshold(t, l).unwrap();
            assert_eq!(logging::threshold(t), l, "{t:?}");
        }
    }
    // The two thresholds are independent.
    logging::set_threshold(Threshold::Primary, LogLevel::Info).unwrap();
    logging::set_threshold(Threshold::Aux, LogLevel::Fatal).unwrap();
    assert_eq!(logging::threshold(Threshold::Primary), LogLevel::Info);
    assert_eq!(logging::threshold(Threshold::Aux), LogLevel::Fatal);

    // --- enabled(): a level passes iff it is not Disabled and <= the primary threshold ---
    for th in ALL_LEVELS {
        logging::set_threshold(Threshold::Primary, th).unwrap();
        for l in ALL_LEVELS {
            let expected = l != LogLevel::Disabled && (l as i32) <= (th as i32);
            assert_eq!(logging::enabled(l), expected, "level {l:?} under {th:?}");
        }
    }

    // --- raw conversions (set_threshold__threshold_invalid / __level_invalid) ---
    for (raw, l) in (-1..=5).zip(ALL_LEVELS) {
        assert_eq!(LogLevel::try_from(raw).unwrap(), l);
        assert_eq!(l as i32, raw);
    }
    for raw in [-2, 6, 100, i32::MIN, i32::MAX] {
        assert_eq!(LogLevel::try_from(raw).unwrap_err().kind(), ErrorKind::InvalidInput, "level {raw}");
    }
    assert_eq!(Threshold::try_from(0).unwrap(), Threshold::Primary);
    assert_eq!(Threshold::try_from(1).unwrap(), Threshold::Aux);
    for raw in [-1, 2, 3, i32::MIN, i32::MAX] {
        assert_eq!(Threshold::try_from(raw).unwrap_err().kind(), ErrorKind::InvalidInput, "threshold {raw}");
    }
    // Level tags of librpma's default stderr format.
    assert_eq!(LogLevel::Fatal.tag(), "*FATAL* ");
    assert_eq!(LogLevel::Error.tag(), "*ERROR* ");
    assert_eq!(LogLevel::Warning.tag(), "*WARN*  ");
    assert_eq!(LogLevel::Notice.tag(), "*NOTE*  ");
    assert_eq!(LogLevel::Info.tag(), "*INFO*  ");
    assert_eq!(LogLevel::Debug.tag(), "*DEBUG* ");

    // --- a custom log function receives messages of a real API call ---
    let fabric = MockFabric::new();
    let dev = Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap();
    let peer = Peer::new(&dev).unwrap();

    let captured: Arc<Mutex<Vec<Captured>>> = Arc::default();
    let sink = Arc::clone(&captured);
    logging::set_function(Some(Arc::new(move |r: &LogRecord<'_>| {
        sink.lock().unwrap().push(Captured {
            level: r.level,
            file: r.file,
            line: r.line,
            function: r.function,
            message: r.message.to_string(),
        });
    })));
    logging::set_threshold(Threshold::Primary, LogLevel::Debug).unwrap();
    logging::set_threshold(Threshold::Aux, LogLevel::Warning).unwrap();

    let msg = listen(&peer, 7001);
    let got = notices(&captured, &msg);
    assert_eq!(got.len(), 1, "expected one notice, captured: {:?}", captured.lock().unwrap());
    let c = &got[0];
    assert_eq!(c.level, LogLevel::Notice);
    assert!(c.file.ends_with(".rs"), "file {}", c.file);
    assert!(c.file.contains("rpma-core"), "file {}", c.file);
    assert!(c.line > 0);
    // The function is the Rust item that logs; its librpma function is the one whose line this is.
    assert_eq!(c.function, "Ep::listen");
    assert_eq!(rpma::librpma::c_function(c.function), Some("rpma_ep_listen"));

    // The aux threshold is only a hint: it does not filter what reaches the function.
    logging::set_threshold(Threshold::Aux, LogLevel::Disabled).unwrap();
    let msg = listen(&peer, 7002);
    assert_eq!(notices(&captured, &msg).len(), 1, "aux threshold must not filter");

    // Exactly at the threshold: delivered.
    logging::set_threshold(Threshold::Primary, LogLevel::Notice).unwrap();
    let msg = listen(&peer, 7003);
    assert_eq!(notices(&captured, &msg).len(), 1, "Notice passes a Notice threshold");

    // --- messages above the primary threshold never reach the function ---
    for (i, th) in [LogLevel::Warning, LogLevel::Error, LogLevel::Fatal, LogLevel::Disabled].into_iter().enumerate() {
        logging::set_threshold(Threshold::Primary, th).unwrap();
        let before = captured.lock().unwrap().len();
        let msg = listen(&peer, 7010 + i as u32);
        assert!(notices(&captured, &msg).is_empty(), "Notice delivered under {th:?}");
        let after = captured.lock().unwrap().clone();
        assert!(
            after[before..].iter().all(|c| th != LogLevel::Disabled && (c.level as i32) <= (th as i32)),
            "a message above {th:?} was delivered: {:?}",
            &after[before..]
        );
    }

    // Peer::new's lines (the mock has neither native flush nor native atomic write): librpma's
    // INFO line, word for word, from Peer::new (rpma_peer_new); the flush's at DEBUG.
    logging::set_threshold(Threshold::Primary, LogLevel::Debug).unwrap();
    let before = captured.lock().unwrap().len();
    let _p2 = Peer::new(&dev).unwrap();
    let lines: Vec<_> = captured.lock().unwrap()[before..].to_vec();
    assert!(
        lines.iter().any(|c| c.level == LogLevel::Info
            && c.function == "Peer::new"
            && c.message == "Native atomic write is not supported - ordinary RDMA write will be used instead."),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|c| c.level == LogLevel::Debug && c.message.starts_with("Native flush is not supported")),
        "{lines:?}"
    );
    logging::set_threshold(Threshold::Primary, LogLevel::Info).unwrap();

    // Nothing reached the `log` facade while the custom function was installed.
    assert!(FACADE.0.lock().unwrap().iter().all(|r| !r.2.starts_with("Waiting for incoming")));

    // --- set_function(None) restores the default (forwarding to the `log` facade) ---
    logging::set_function(None);
    logging::set_threshold(Threshold::Primary, LogLevel::Debug).unwrap();
    let before = captured.lock().unwrap().len();
    let msg = listen(&peer, 7030);
    assert_eq!(captured.lock().unwrap().len(), before, "the custom function still called");
    assert!(notices(&captured, &msg).is_empty());
    {
        let facade = FACADE.0.lock().unwrap();
        let fwd: Vec<_> = facade.iter().filter(|r| r.2 == msg).collect();
        assert_eq!(fwd.len(), 1, "default function forwards to the log facade: {facade:?}");
        let (level, target, _, file, line) = fwd[0];
        assert_eq!(*level, ::log::Level::Info, "Notice maps to Info");
        assert_eq!(target, "rpma");
        assert!(file.as_deref().is_some_and(|f| f.ends_with(".rs")), "{file:?}");
        assert!(line.is_some_and(|l| l > 0));
    }
    // The default function drops messages above the primary threshold too.
    logging::set_threshold(Threshold::Primary, LogLevel::Warning).unwrap();
    let msg = listen(&peer, 7032);
    assert!(FACADE.0.lock().unwrap().iter().all(|r| r.2 != msg));
    logging::set_threshold(Threshold::Primary, LogLevel::Debug).unwrap();

    // A function can be installed again after the default was restored.
    let count = Arc::new(Mutex::new(0usize));
    let c2 = Arc::clone(&count);
    logging::set_function(Some(Arc::new(move |r: &LogRecord<'_>| {
        if r.level == LogLevel::Notice {
            *c2.lock().unwrap() += 1;
        }
    })));
    let _ = listen(&peer, 7031);
    assert!(*count.lock().unwrap() >= 1);

    // --- restore the defaults ---
    logging::set_function(None);
    logging::set_threshold(Threshold::Primary, primary).unwrap();
    logging::set_threshold(Threshold::Aux, aux).unwrap();
    assert_eq!(logging::threshold(Threshold::Primary), primary);
    assert_eq!(logging::threshold(Threshold::Aux), aux);
}
