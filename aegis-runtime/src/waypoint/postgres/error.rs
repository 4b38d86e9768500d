//! What a PostgreSQL failure says in a [`StoreError::Backend`]: the
//! server's SQLSTATE, message, detail and hint (not just "db error"), the
//! cause of a client-side failure, and never a credential.
//!
//! Server text can quote values (a failing row, a trigger's message), so
//! each part is passed through [`redact_excerpt`]: secret-shaped substrings
//! removed, then bounded. Errors raised while connecting also lose the
//! configured password by value, and the connection is described without
//! it.

use std::error::Error as _;
use tokio_postgres::Config;

use crate::error::StoreError;
use crate::error::redact::redact_excerpt;
use crate::error::{REDACTED, redact_connection_string, scrub_values};

/// A failed statement (or any other client error) as a
/// [`StoreError::Backend`]: `postgres: ERROR 23514: <message>; detail:
/// <detail>; hint: <hint>` for a server error, the error and its causes
/// otherwise.
pub(crate) fn backend(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(format!("postgres: {}", describe_error(&e)))
}

/// The server's report, or the client's error with its causes.
fn describe_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!(
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                redact_excerpt(db.message())
            );
            if let Some(detail) = db.detail() {
                text.push_str("; detail: ");
                text.push_str(&redact_excerpt(detail));
            }
            if let Some(hint) = db.hint() {
                text.push_str("; hint: ");
                text.push_str(&redact_excerpt(hint));
            }
            text
        }
        None => {
            // tokio-postgres's own Display names only the kind ("error
            // connecting to server"); the reason is in the causes.
            let mut text = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                text.push_str(": ");
                text.push_str(&redact_excerpt(&c.to_string()));
                cause = c.source();
            }
            text
        }
    }
}

/// A connection attempt that failed, naming where it went (without the
/// password) and why.
pub(crate) fn connect_error(config: &Config, e: &tokio_postgres::Error) -> StoreError {
    let password = config
        .get_password()
        .and_then(|p| std::str::from_utf8(p).ok());
    StoreError::Backend(format!(
        "postgres: cannot connect ({}): {}",
        describe(config),
        scrub_values(&describe_error(e), password)
    ))
}

/// A connection string tokio-postgres could not parse, quoted with its
/// credentials redacted.
pub(crate) fn invalid_connection_string(connection: &str, e: &tokio_postgres::Error) -> StoreError {
    let reason = e
        .source()
        .map_or_else(|| e.to_string(), |c| redact_excerpt(&c.to_string()));
    StoreError::Backend(format!(
        "postgres: invalid connection string `{}`: {reason}",
        redact_connection_string(connection)
    ))
}

/// Where a connection attempt went, without credentials. A host or user
/// holding `@` or `:` is what a password with an unencoded `@` turns into
/// when a URL is parsed, so that part is redacted too.
pub(crate) fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => after_last_at(name),
            tokio_postgres::config::Host::Unix(path) => after_last_at(&path.display().to_string()),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let user = config.get_user().map(|u| match u.split_once(':') {
        Some((name, _)) => format!("{}:{REDACTED}", after_last_at(name)),
        None => after_last_at(u),
    });
    let password = config
        .get_password()
        .and_then(|p| std::str::from_utf8(p).ok());
    let text = format!(
        "host={} port={} dbname={} user={}",
        if hosts.is_empty() {
            "localhost".to_string()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_string()
        } else {
            ports.join(",")
        },
        config
            .get_dbname()
            .map_or_else(|| "(default)".to_string(), after_last_at),
        user.as_deref().unwrap_or("(default)"),
    );
    scrub_values(&text, password)
}

/// `s` with everything up to its last `@` redacted.
fn after_last_at(s: &str) -> String {
    match s.rfind('@') {
        Some(at) => format!("{REDACTED}{}", &s[at..]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn a_described_connection_never_shows_the_password() {
        for (connection, shown) in [
            (
                "host=db port=6432 user=alice password=hunter2 dbname=app",
                "host=db port=6432 dbname=app user=alice",
            ),
            // An unencoded `@` in the password: the parser takes part of it
            // for the host.
            (
                "postgresql://alice:hunt@er2@db/app",
                "host=[REDACTED]@db port=5432 dbname=app user=alice",
            ),
            (
                "host=db user=alice:hunter2 dbname=app",
                "host=db port=5432 dbname=app user=alice:[REDACTED]",
            ),
        ] {
            let config = Config::from_str(connection).unwrap();
            assert_eq!(describe(&config), shown, "{connection}");
        }
    }

    #[test]
    fn unparsable_connection_strings_are_quoted_without_their_password() {
        for connection in [
            "postgresql:/alice:hunter2@db/app",
            "postgres//:hunter2@db",
            "host=db password='hunter2",
            "host=db password=hunter2 port=notaport",
            "postgresql://alice:hunter2@db:notaport/app",
            "host=db pasword=hunter2 dbname",
            "host=db password = hunter2 bogus",
            "alice:hunter2@db",
        ] {
            let err = Config::from_str(connection).unwrap_err();
            let shown = invalid_connection_string(connection, &err).to_string();
            assert!(!shown.contains("hunter2"), "{connection}: {shown}");
            assert!(shown.contains("invalid connection string"), "{shown}");
        }
        let err = Config::from_str("host=db port=notaport").unwrap_err();
        assert_eq!(
            invalid_connection_string("host=db port=notaport", &err).to_string(),
            "postgres: invalid connection string `host=db port=notaport`: invalid value for option `port`"
        );
    }
}
