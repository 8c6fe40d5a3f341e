//! Log setup shared by the binaries: `FLINT_LOG` filters (default `info`), text or JSON lines
//! on stderr. A JSON line always carries `run` and `round` (see [`RunAndRound`]), so that a log
//! shipper can group a federation's lines by run and round without parsing messages.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format {other:?}; expected text or json"
            )),
        }
    }
}

/// The format [`init`] installed, if it was called: how the process's last word is written.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the global subscriber; a second call is a no-op.
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_env("FLINT_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: log files and container logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(RunAndRound(
                tracing_subscriber::fmt::format()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(true),
            ))
            .try_init(),
    };
}

/// Writes the error a process ends with: a JSON line where the log is JSON (so a shipper parses
/// every line, the last too), else text; either way the message's control characters (a
/// server's text may carry ESC, NUL or a forged newline) are escaped, but in text a message of
/// several lines keeps them, every line after the first indented.
pub fn fatal(message: &str) {
    match FORMAT.get() {
        Some(LogFormat::Json) => {
            tracing::error!(error = %escape_controls(message), "flint stopped")
        }
        _ => eprintln!("flint: {}", indented_lines(message)),
    }
}

/// `message`'s lines, each escaped, every line after the first indented: a list (`flint grid`'s
/// failed runs) reads as lines, yet no text inside it can start a line of its own that looks like
/// flint's.
fn indented_lines(message: &str) -> String {
    message
        .lines()
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// `message` with every control character written as its escape (`\u{1b}`, `\n`).
pub fn escape_controls(message: &str) -> String {
    message
        .chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// The run a process serves, where it serves one (the server): the `run` of every JSON line
/// that no span of its own names.
static RUN: OnceLock<String> = OnceLock::new();
/// The process's current round, likewise (`u64::MAX`: none yet).
static ROUND: AtomicU64 = AtomicU64::new(u64::MAX);

/// Names the process's run for its JSON lines (the first call wins: one run per process).
pub fn set_run(run: &str) {
    let _ = RUN.set(run.to_string());
}

/// The process's current round, for its JSON lines.
pub fn set_round(round: u32) {
    ROUND.store(u64::from(round), Ordering::Relaxed);
}

/// tracing-subscriber's JSON lines, with `run` and `round` at the top level of each: the
/// event's own fields if it has them, else the innermost span's that has them (a client task's
/// span in a process of several clients), else the process's ([`set_run`], [`set_round`]);
/// `null` where none is known yet (before the run starts).
pub struct RunAndRound(pub Format<Json>);

impl<S, N> FormatEvent<S, N> for RunAndRound
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(&line) else {
            return writer.write_str(&line);
        };
        for key in ["run", "round"] {
            if !object.contains_key(key) {
                let value = from_spans(&object, key).unwrap_or_else(|| from_process(key));
                object.insert(key.to_string(), value);
            }
        }
        writeln!(writer, "{}", Value::Object(object))
    }
}

/// `key` of the innermost span that has it.
fn from_spans(object: &Map<String, Value>, key: &str) -> Option<Value> {
    let spans = object.get("spans")?.as_array()?;
    spans.iter().rev().find_map(|s| s.get(key).cloned())
}

fn from_process(key: &str) -> Value {
    match key {
        "run" => RUN.get().map_or(Value::Null, |r| Value::from(r.as_str())),
        _ => match ROUND.load(Ordering::Relaxed) {
            u64::MAX => Value::Null,
            r => Value::from(r),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_written_as_their_escapes() {
        let forged = "refused \u{1b}[31mred\u{0}\nflint: ok";
        assert_eq!(
            super::escape_controls(forged),
            "refused \\u{1b}[31mred\\u{0}\\nflint: ok"
        );
        assert_eq!(super::escape_controls("client-1 ü"), "client-1 ü");
    }

    #[test]
    fn a_fatal_message_keeps_its_lines_indented_under_the_first() {
        let failed = "2 run(s) failed:\r\na: cannot read x\nb: refused \u{1b}[31m\rx";
        assert_eq!(
            super::indented_lines(failed),
            "2 run(s) failed:\n  a: cannot read x\n  b: refused \\u{1b}[31m\\rx"
        );
        assert_eq!(super::indented_lines("x\nflint: ok"), "x\n  flint: ok");
    }
}
