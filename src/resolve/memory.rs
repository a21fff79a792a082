//! Memory sizes in the two notations a ValkeyConfig mixes: Valkey's (`maxmemory 1500mb`) and
//! Kubernetes quantities (`resources.memory: 2Gi`). Pure; the ValkeyConfig webhook compares
//! `maxmemory` with the container memory, and the renderer derives `maxmemory` from it.

/// A memory size that does not parse; the message shows how to write one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemorySizeError {
    #[error(
        "{0:?} is not a Valkey memory size: write a whole number with an optional unit b, k, kb, m, mb, g or gb (for example 1500mb or 12gb)"
    )]
    NotValkeyMemory(String),
    #[error("{0:?} is not a Kubernetes quantity (for example 2Gi, 1500Mi or 2G)")]
    NotQuantity(String),
}

/// Bytes of a Valkey memory value as valkey.conf reads it (`memtoull`): a non-negative integer
/// with an optional unit, case-insensitive: `b`, `k` (1000), `kb` (1024), `m` (10^6),
/// `mb` (1024^2), `g` (10^9), `gb` (1024^3).
pub fn parse_valkey_memory(value: &str) -> Result<u64, MemorySizeError> {
    let v = value.trim().to_ascii_lowercase();
    let digits_end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(digits_end);
    let invalid = || MemorySizeError::NotValkeyMemory(value.to_owned());
    if number.is_empty() {
        return Err(invalid());
    }
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(invalid()),
    };
    let n: u64 = number.parse().map_err(|_| invalid())?;
    n.checked_mul(multiplier).ok_or_else(invalid)
}

/// Bytes of a Kubernetes quantity (`2Gi`, `1500M`, `1.5Gi`, `2e9`, `128974848`), rounded up to
/// a whole byte. Negative quantities are refused.
pub fn parse_quantity_bytes(value: &str) -> Result<u128, MemorySizeError> {
    let invalid = || MemorySizeError::NotQuantity(value.to_owned());
    let v = value.trim();
    let v = v.strip_prefix('+').unwrap_or(v);
    let num_end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, suffix) = v.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(invalid());
    }
    if int_part.len() + frac_part.len() > 30 {
        return Err(invalid());
    }
    // The number as mantissa / 10^scale.
    let digits = format!("{int_part}{frac_part}");
    let mantissa: u128 = digits.parse().map_err(|_| invalid())?;
    let mut scale = frac_part.len() as i32;
    let binary = |p: u32| 1024u128.pow(p);
    let multiplier: u128 = match suffix {
        "" => 1,
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => {
            scale += 9;
            1
        }
        "u" => {
            scale += 6;
            1
        }
        "m" => {
            scale += 3;
            1
        }
        "k" => 1000,
        "M" => 1000u128.pow(2),
        "G" => 1000u128.pow(3),
        "T" => 1000u128.pow(4),
        "P" => 1000u128.pow(5),
        "E" => 1000u128.pow(6),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| invalid())?;
            if !(-30..=30).contains(&exp) {
                return Err(invalid());
            }
            scale -= exp;
            1
        }
        _ => return Err(invalid()),
    };
    let total = mantissa.checked_mul(multiplier).ok_or_else(invalid)?;
    if scale <= 0 {
        total
            .checked_mul(10u128.pow((-scale) as u32))
            .ok_or_else(invalid)
    } else {
        let div = 10u128.checked_pow(scale as u32).ok_or_else(invalid)?;
        Ok(total.div_ceil(div))
    }
}

/// Human rendering of a byte count in binary units, for messages (`1.5Gi`).
pub fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    let rounded = (value * 100.0).round() / 100.0;
    format!("{rounded}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valkey_units_follow_memtoull() {
        assert_eq!(parse_valkey_memory("0"), Ok(0));
        assert_eq!(parse_valkey_memory("100"), Ok(100));
        assert_eq!(parse_valkey_memory("100b"), Ok(100));
        assert_eq!(parse_valkey_memory("1k"), Ok(1000));
        assert_eq!(parse_valkey_memory("1kb"), Ok(1024));
        assert_eq!(parse_valkey_memory("1m"), Ok(1_000_000));
        assert_eq!(parse_valkey_memory("1500mb"), Ok(1500 * 1024 * 1024));
        assert_eq!(parse_valkey_memory("2g"), Ok(2_000_000_000));
        assert_eq!(parse_valkey_memory("12GB"), Ok(12 * 1024 * 1024 * 1024));
        assert_eq!(parse_valkey_memory(" 3Gb "), Ok(3 * 1024 * 1024 * 1024));
    }

    #[test]
    fn valkey_memory_rejects_what_valkey_rejects() {
        for bad in [
            "",
            "mb",
            "1.5gb",
            "-1",
            "1Gi",
            "1tb",
            "1 gb",
            "99999999999999999999gb",
            "10x",
        ] {
            assert!(
                parse_valkey_memory(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
        assert!(
            parse_valkey_memory("1Gi")
                .unwrap_err()
                .to_string()
                .contains("1500mb")
        );
    }

    #[test]
    fn quantities_in_binary_and_decimal_suffixes() {
        assert_eq!(parse_quantity_bytes("2Gi"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_quantity_bytes("16Gi"), Ok(16 << 30));
        assert_eq!(parse_quantity_bytes("1500Mi"), Ok(1500 << 20));
        assert_eq!(parse_quantity_bytes("1Ki"), Ok(1024));
        assert_eq!(parse_quantity_bytes("2G"), Ok(2_000_000_000));
        assert_eq!(parse_quantity_bytes("1k"), Ok(1000));
        assert_eq!(parse_quantity_bytes("128974848"), Ok(128_974_848));
        assert_eq!(parse_quantity_bytes("+1M"), Ok(1_000_000));
    }

    #[test]
    fn quantities_with_fractions_exponents_and_milli_round_up() {
        assert_eq!(parse_quantity_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity_bytes(".5Ki"), Ok(512));
        assert_eq!(parse_quantity_bytes("2e9"), Ok(2_000_000_000));
        assert_eq!(parse_quantity_bytes("129e6"), Ok(129_000_000));
        assert_eq!(parse_quantity_bytes("1500m"), Ok(2));
        assert_eq!(parse_quantity_bytes("1E3"), Ok(1000));
        assert_eq!(parse_quantity_bytes("1Ei"), Ok(1 << 60));
    }

    #[test]
    fn malformed_quantities_are_refused() {
        for bad in [
            "", "Gi", "1GiB", "-1Gi", "1..5Gi", "1.2.3", "1gi", "1e", "1e99", "abc", "1 Gi",
        ] {
            assert!(
                parse_quantity_bytes(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn human_bytes_for_messages() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(2 << 30), "2Gi");
        assert_eq!(human_bytes(1500 << 20), "1.46Gi");
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_valkey_memory(&s);
            let _ = parse_quantity_bytes(&s);
        }

        #[test]
        fn whole_gibibytes_agree_between_notations(n in 0u64..100_000) {
            prop_assert_eq!(
                parse_valkey_memory(&format!("{n}gb")).unwrap() as u128,
                parse_quantity_bytes(&format!("{n}Gi")).unwrap()
            );
        }
    }
    use proptest::prelude::prop_assert_eq;
}
