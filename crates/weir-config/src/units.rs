//! Address ranges (`"10.0.0.0/8"`, `"::1"`), durations (`"30s"`,
//! `"500ms"`, `"2m"`, `"1h"`, or a number of seconds) and
//! sizes (`"8KiB"`, `"1MiB"`, `"64k"`, `"10m"` as nginx writes them, or a
//! number of bytes) as a user writes them in the config.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::raw::Value;

pub fn parse_duration(v: &Value) -> Result<Duration, String> {
    match v {
        Value::Int(n) if *n >= 0 => Ok(Duration::from_secs(*n as u64)),
        Value::Float(f) if *f >= 0.0 && f.is_finite() => Ok(Duration::from_secs_f64(*f)),
        Value::Str(s) => {
            let s = s.trim();
            let split = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(s.len());
            let (num, unit) = s.split_at(split);
            let n: f64 = num.parse().map_err(|_| {
                format!("`{s}` is not a duration; write it like \"30s\", \"500ms\" or \"2m\"")
            })?;
            let secs = match unit.trim() {
                "" | "s" | "sec" | "secs" => n,
                "ms" => n / 1000.0,
                "m" | "min" => n * 60.0,
                "h" => n * 3600.0,
                "d" => n * 86400.0,
                u => {
                    return Err(format!(
                        "unknown duration unit `{u}` in `{s}`; use ms, s, m, h or d"
                    ));
                }
            };
            Ok(Duration::from_secs_f64(secs))
        }
        _ => Err("a duration must not be negative".into()),
    }
}

pub fn parse_size(v: &Value) -> Result<u64, String> {
    match v {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        Value::Str(s) => {
            let s = s.trim();
            let split = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(s.len());
            let (num, unit) = s.split_at(split);
            let n: f64 = num.parse().map_err(|_| {
                format!(
                    "`{s}` is not a size; write it like \"8KiB\", \"1MiB\" or a number of bytes"
                )
            })?;
            let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => 1.0,
                "k" | "kb" | "kib" => 1024.0,
                "m" | "mb" | "mib" => 1024.0 * 1024.0,
                "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
                u => {
                    return Err(format!(
                        "unknown size unit `{u}` in `{s}`; use KiB, MiB or GiB"
                    ));
                }
            };
            Ok((n * mult) as u64)
        }
        _ => Err(
            "a size must be a whole, non-negative number of bytes or a string like \"1MiB\"".into(),
        ),
    }
}

/// CIDRs or single addresses, as written in the config.
pub fn parse_cidrs(list: &[String]) -> Result<Vec<IpNet>, String> {
    list.iter()
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("`{s}` is not an address or CIDR like \"10.0.0.0/8\""))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        let d = |s: &str| parse_duration(&Value::Str(s.into())).unwrap();
        assert_eq!(d("30s"), Duration::from_secs(30));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(
            parse_duration(&Value::Int(7)).unwrap(),
            Duration::from_secs(7)
        );
        assert!(parse_duration(&Value::Str("5 fortnights".into())).is_err());
        assert!(parse_duration(&Value::Int(-1)).is_err());
    }

    #[test]
    fn sizes_in_every_unit() {
        let s = |s: &str| parse_size(&Value::Str(s.into())).unwrap();
        assert_eq!(s("8KiB"), 8192);
        assert_eq!(s("1m"), 1 << 20);
        assert_eq!(s("64k"), 65536);
        assert_eq!(s("2GiB"), 2 << 30);
        assert_eq!(parse_size(&Value::Int(100)).unwrap(), 100);
        assert!(parse_size(&Value::Str("12 parsecs".into())).is_err());
    }
}
