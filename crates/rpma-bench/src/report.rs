//! Benchmark results and their three output formats (table, JSON, CSV).

use std::io::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

use rpma_scenarios::native::{OpPath, Source};

/// The version of the JSON schema (`docs/bench.md`).
pub const SCHEMA_VERSION: u32 = 6;

/// How a report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned human-readable table.
    Table,
    /// One JSON document.
    Json,
    /// CSV with a header line.
    Csv,
}

/// Latency statistics of a run, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p99_9: u64,
    /// Largest.
    pub max: u64,
}

impl Latency {
    /// The statistics of a histogram of nanoseconds.
    #[must_use]
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// A memcpy of the same size measured in the same run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Baseline {
    /// memcpy bandwidth, GB/s (10^9 bytes per second).
    pub gb_s: f64,
    /// The operation's bandwidth divided by the memcpy's.
    pub ratio: f64,
    /// The alignment, in bytes, source and destination share (page-aligned: 4096).
    pub align: usize,
}

/// The result of one operation at one size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// The operation (`read`, `write`, ...).
    pub op: &'static str,
    /// Message size, bytes.
    pub size: usize,
    /// Operations in flight per connection.
    pub qd: usize,
    /// Connections.
    pub conns: usize,
    /// Client threads.
    pub threads: usize,
    /// One-sided operations posted per chain (`--batch`; 1: one by one).
    pub batch: usize,
    /// Scatter-gather pieces of each operation's local side (`--sge`).
    pub sge: usize,
    /// Writes and sends inline (`--inline`).
    pub inline: bool,
    /// How the operations were posted and completed: `"sync"` (post, poll the CQ) or `"async"`
    /// (`--async`: each operation's future awaited through `rpma::tokio`).
    pub api: &'static str,
    /// Measured operations (all connections, warm-up excluded).
    pub ops: u64,
    /// Measured time, seconds.
    pub elapsed_s: f64,
    /// `"completion"` (post to completion), `"half_round_trip"` (ping-pongs), `"connection"`
    /// (`connect`: a connection's whole setup and teardown) or `"none"
    /// (`--no-latency`).
    pub latency_kind: &'static str,
    /// Latency statistics, nanoseconds (`None` with `--no-latency`).
    pub latency_ns: Option<Latency>,
    /// Bandwidth, MB/s (10^6 bytes per second).
    pub mb_s: f64,
    /// Bandwidth, GB/s (10^9 bytes per second).
    pub gb_s: f64,
    /// Operations per second.
    pub msg_rate: f64,
    /// The memcpy baseline (with `--baseline`).
    pub baseline: Option<Baseline>,
    /// How the run's flushes (`write-flush`, `flush`) or atomic writes (`atomic-write`) went:
    /// native, emulated, persistent read (verbs' rule) or mixed; `None` for the other operations.
    pub op_path: Option<OpPath>,
}

/// A whole benchmark report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    /// `SCHEMA_VERSION`.
    pub schema: u32,
    /// `"mock"` or `"verbs"`.
    pub backend: &'static str,
    /// The device the client used.
    pub device: String,
    /// Where the results' `op_path` comes from: the backend's counters (verbs) or the device's
    /// capabilities (the mock).
    pub op_path_source: Source,
    /// One entry per operation and size, in the order run.
    pub results: Vec<RunResult>,
}

fn gbs(x: f64) -> String {
    format!("{x:.3}")
}

impl BenchReport {
    /// Writes the report in `format`.
    ///
    /// # Errors
    /// If `out` fails.
    pub fn write(&self, format: OutputFormat, out: &mut dyn Write) -> std::io::Result<()> {
        match format {
            OutputFormat::Json => {
                serde_json::to_writer_pretty(&mut *out, self)?;
                writeln!(out)
            }
            OutputFormat::Csv => self.write_csv(out),
            OutputFormat::Table => self.write_table(out),
        }
    }

    fn write_csv(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "backend,device,op,size,qd,conns,threads,ops,elapsed_s,latency_kind,lat_min_ns,lat_mean_ns,lat_p50_ns,\
             lat_p90_ns,lat_p99_ns,lat_p99_9_ns,lat_max_ns,mb_s,gb_s,msg_rate,memcpy_gb_s,memcpy_ratio,op_path,batch,\
             sge,inline,api"
        )?;
        for r in &self.results {
            // Seven latency fields, empty with `--no-latency`.
            let lat = r.latency_ns.map_or_else(
                || ",,,,,,".to_owned(),
                |l| format!("{},{:.1},{},{},{},{},{}", l.min, l.mean, l.p50, l.p90, l.p99, l.p99_9, l.max),
            );
            let (bg, br) =
                r.baseline.map_or((String::new(), String::new()), |b| (gbs(b.gb_s), format!("{:.3}", b.ratio)));
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{:.6},{},{},{:.3},{},{:.1},{},{},{},{},{},{},{}",
                self.backend,
                self.device,
                r.op,
                r.size,
                r.qd,
                r.conns,
                r.threads,
                r.ops,
                r.elapsed_s,
                r.latency_kind,
                lat,
                r.mb_s,
                gbs(r.gb_s),
                r.msg_rate,
                bg,
                br,
                r.op_path.map_or("", OpPath::name),
                r.batch,
                r.sge,
                r.inline,
                r.api
            )?;
        }
        Ok(())
    }

    fn write_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let source = match self.op_path_source {
            Source::Counters => "counted by rpma-verbs",
            Source::Capabilities => "from the device's capabilities",
        };
        writeln!(
            out,
            "rpma bench: backend {}, device {} (path of flushes and atomic writes: {source})",
            self.backend, self.device
        )?;
        let baseline = self.results.iter().any(|r| r.baseline.is_some());
        write!(
            out,
            "{:<13} {:>8} {:>4} {:>5} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>12}",
            "op",
            "size",
            "qd",
            "conns",
            "ops",
            "latency",
            "p50 us",
            "p90 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "MB/s",
            "GB/s",
            "msg/s"
        )?;
        if baseline {
            write!(out, " {:>11} {:>7}", "memcpy GB/s", "ratio")?;
        }
        writeln!(out, " path")?;
        let us = |ns: Option<u64>| ns.map_or_else(|| "-".to_owned(), |ns| format!("{:.2}", ns as f64 / 1000.0));
        for r in &self.results {
            let l = r.latency_ns.as_ref();
            let kind = match r.latency_kind {
                "half_round_trip" => "rtt/2",
                "connection" => "conn",
                "none" => "-",
                _ => "compl",
            };
            let mut name = r.op.to_owned();
            if r.batch > 1 {
                name += &format!(" b{}", r.batch);
            }
            if r.sge > 1 {
                name += &format!(" s{}", r.sge);
            }
            if r.inline {
                name += " inl";
            }
            if r.api == "async" {
                name += " async";
            }
            write!(
                out,
                "{:<13} {:>8} {:>4} {:>5} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10.1} {:>8} {:>12.0}",
                name,
                r.size,
                r.qd,
                r.conns,
                r.ops,
                kind,
                us(l.map(|l| l.p50)),
                us(l.map(|l| l.p90)),
                us(l.map(|l| l.p99)),
                us(l.map(|l| l.p99_9)),
                us(l.map(|l| l.max)),
                r.mb_s,
                gbs(r.gb_s),
                r.msg_rate
            )?;
            if let Some(b) = r.baseline {
                write!(out, " {:>11} {:>7.3}", gbs(b.gb_s), b.ratio)?;
            } else if baseline {
                write!(out, " {:>11} {:>7}", "", "")?;
            }
            writeln!(out, " {}", r.op_path.map_or("-", OpPath::name))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> BenchReport {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in [1000, 2000, 3000, 4000] {
            h.record(v).unwrap();
        }
        BenchReport {
            schema: SCHEMA_VERSION,
            backend: "mock",
            device: "mock0".into(),
            op_path_source: Source::Capabilities,
            results: vec![RunResult {
                op: "write",
                size: 8,
                qd: 1,
                conns: 1,
                threads: 1,
                batch: 1,
                sge: 1,
                inline: false,
                api: "sync",
                ops: 4,
                elapsed_s: 0.5,
                latency_kind: "completion",
                latency_ns: Some(Latency::of(&h)),
                mb_s: 64e-6,
                gb_s: 64e-9,
                msg_rate: 8.0,
                baseline: Some(Baseline { gb_s: 10.0, ratio: 0.5, align: 4096 }),
                op_path: None,
            }],
        }
    }

    #[test]
    fn latency_statistics_come_from_the_histogram() {
        let l = report().results[0].latency_ns.expect("measured");
        assert_eq!((l.min, l.max), (1000, 4001));
        assert!(l.p50 >= 2000 && l.p50 <= 2002, "{l:?}");
        assert!((l.mean - 2500.0).abs() < 5.0, "{l:?}");
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_run() {
        let mut v = Vec::new();
        report().write(OutputFormat::Csv, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert!(lines[1].starts_with("mock,mock0,write,8,1,1,1,4,"), "{}", lines[1]);
        assert!(lines[1].ends_with(",10.000,0.500,,1,1,false,sync"), "{}", lines[1]);
    }

    #[test]
    fn table_names_every_run() {
        let mut v = Vec::new();
        report().write(OutputFormat::Table, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.contains("backend mock, device mock0"));
        assert!(s.lines().nth(2).unwrap().starts_with("write "), "{s}");
        assert!(s.contains("memcpy GB/s"));
        assert!(s.lines().nth(1).unwrap().ends_with(" ratio path"), "{s}");
        assert!(s.lines().nth(2).unwrap().ends_with(" -"), "{s}");
    }

    #[test]
    fn the_path_of_flushes_is_in_every_format() {
        let mut r = report();
        r.results[0].op = "write-flush";
        r.results[0].op_path = Some(OpPath::Emulated);
        let mut v = Vec::new();
        r.write(OutputFormat::Json, &mut v).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&v).unwrap();
        assert_eq!(
            (j["schema"].as_u64(), j["op_path_source"].as_str()),
            (Some(u64::from(SCHEMA_VERSION)), Some("capabilities"))
        );
        assert_eq!(j["results"][0]["op_path"], "emulated");
        let mut v = Vec::new();
        r.write(OutputFormat::Csv, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.lines().next().unwrap().ends_with(",op_path,batch,sge,inline,api"));
        assert!(s.lines().nth(1).unwrap().ends_with(",emulated,1,1,false,sync"), "{s}");
        let mut v = Vec::new();
        r.write(OutputFormat::Table, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.lines().nth(2).unwrap().ends_with(" emulated"), "{s}");
        assert!(s.contains("from the device's capabilities"), "{s}");
    }

    #[test]
    fn a_run_without_latency_says_so_in_every_format() {
        let mut r = report();
        r.results[0].latency_kind = "none";
        r.results[0].latency_ns = None;
        let mut v = Vec::new();
        r.write(OutputFormat::Json, &mut v).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&v).unwrap();
        assert_eq!(j["schema"].as_u64(), Some(6));
        assert_eq!(j["results"][0]["latency_kind"], "none");
        assert!(j["results"][0]["latency_ns"].is_null(), "{j}");
        assert_eq!(j["results"][0]["msg_rate"].as_f64(), Some(8.0));
        let mut v = Vec::new();
        r.write(OutputFormat::Csv, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count(), "{s}");
        assert!(lines[1].contains(",0.500000,none,,,,,,,,0.000,"), "{s}");
        let mut v = Vec::new();
        r.write(OutputFormat::Table, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let row: Vec<_> = s.lines().nth(2).unwrap().split_whitespace().collect();
        // op, size, qd, conns, ops, then the latency kind and five percentiles: all "-".
        assert_eq!(&row[5..11], ["-"; 6], "{s}");
    }
}
