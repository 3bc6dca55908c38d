//! f32 ⇄ bf16/f16 conversions on edge values.

use kiln::params::convert::*;

fn bf16(x: u32) -> u16 {
    f32_to_bf16_bits(f32::from_bits(x))
}
fn f16(x: f32) -> u16 {
    f32_to_f16_bits(x)
}

#[test]
fn bf16_round_to_nearest_even() {
    assert_eq!(bf16(0x3f80_0000), 0x3f80); // 1.0
    assert_eq!(bf16(0x3f80_8000), 0x3f80); // tie, even stays
    assert_eq!(bf16(0x3f81_8000), 0x3f82); // tie, odd rounds up
    assert_eq!(bf16(0x3f80_8001), 0x3f81); // above the tie
    assert_eq!(bf16(0x3f80_7fff), 0x3f80); // below the tie
    assert_eq!(bf16(0xbf81_8000), 0xbf82); // negative tie
    assert_eq!(bf16(0x7f7f_ffff), 0x7f80); // f32::MAX rounds to +inf
    assert_eq!(bf16(0x7f7f_7fff), 0x7f7f); // largest value that stays finite
    assert_eq!(bf16(0x7f80_0000), 0x7f80); // +inf
    assert_eq!(bf16(0xff80_0000), 0xff80); // -inf
    assert_eq!(bf16(0x0000_0000), 0x0000);
    assert_eq!(bf16(0x8000_0000), 0x8000); // -0
                                           // Subnormals.
    assert_eq!(bf16(0x0000_0001), 0x0000);
    assert_eq!(bf16(0x0000_8000), 0x0000); // tie to even (0)
    assert_eq!(bf16(0x0001_8000), 0x0002); // tie to even (2)
    assert_eq!(bf16(0x007f_ffff), 0x0080); // largest subnormal rounds to the smallest normal
}

#[test]
fn bf16_nan_stays_nan_with_payload() {
    assert_eq!(bf16(0x7fc0_0000), 0x7fc0);
    assert_eq!(bf16(0x7fc0_0001), 0x7fc0); // low payload bits are dropped, not rounded into inf
    assert_eq!(bf16(0x7f80_0001), 0x7fc0); // signalling NaN with only low bits: quiet NaN, not inf
    assert_eq!(bf16(0x7fa5_0000), 0x7fe5); // high payload kept, quieted
    assert_eq!(bf16(0xffff_ffff), 0xffff); // sign and payload kept
    assert_eq!(bf16(0x7fff_ffff), 0x7fff); // must not carry into the sign bit
    for bits in [0x7f80_0001u32, 0x7fbf_ffff, 0xff80_0001, 0x7fff_8000] {
        assert!(bf16_bits_to_f32(bf16(bits)).is_nan(), "{bits:#x}");
    }
}

#[test]
fn bf16_matches_half_crate_on_a_sweep() {
    let mut x = 0x9e37_79b9u32;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let f = f32::from_bits(x);
        if f.is_nan() {
            continue;
        }
        assert_eq!(bf16(x), half::bf16::from_f32(f).to_bits(), "{x:#x}");
    }
}

#[test]
fn f16_round_to_nearest_even() {
    assert_eq!(f16(1.0), 0x3c00);
    assert_eq!(f16(65504.0), 0x7bff); // max
    assert_eq!(f16(65519.99), 0x7bff); // below the tie
    assert_eq!(f16(65520.0), 0x7c00); // tie above max rounds to inf
    assert_eq!(f16(f32::MAX), 0x7c00);
    assert_eq!(f16(-f32::INFINITY), 0xfc00);
    assert_eq!(f16(1.0 + 1.0 / 2048.0), 0x3c00); // tie to even
    assert_eq!(f16(1.0 + 3.0 / 2048.0), 0x3c02); // tie to even (up)
    assert_eq!(f16(5.960_464_5e-8), 0x0001); // smallest subnormal
    assert_eq!(f16(2.980_232_2e-8), 0x0000); // half of it: tie to even (0)
    assert_eq!(f16(8.940_697e-8), 0x0002); // 1.5 × smallest: tie to even (2)
    assert_eq!(f16(6.097_555e-5), 0x03ff); // largest subnormal
    assert_eq!(f16(-0.0), 0x8000);
    assert!(f16_bits_to_f32(f16(f32::NAN)).is_nan());
    assert!(f16_bits_to_f32(f16(f32::from_bits(0x7f80_0001))).is_nan());
    assert_eq!(
        f16(f32::from_bits(0xffc0_0000)) & 0x8000,
        0x8000,
        "NaN sign kept"
    );
}

#[test]
fn sixteen_bit_to_f32_is_exact_and_round_trips() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let mut f = vec![0f32; all.len()];
    let mut back = vec![0u16; all.len()];
    bf16_to_f32(&all, &mut f);
    f32_to_bf16_rne(&f, &mut back);
    for (i, (&h, &b)) in all.iter().zip(&back).enumerate() {
        assert_eq!(f[i].to_bits(), (h as u32) << 16);
        if !f[i].is_nan() || h & 0x0040 != 0 {
            assert_eq!(b, h, "bf16 {h:#x}");
        } else {
            assert!(bf16_bits_to_f32(b).is_nan());
        }
    }
    f16_to_f32(&all, &mut f);
    f32_to_f16(&f, &mut back);
    for (i, (&h, &b)) in all.iter().zip(&back).enumerate() {
        assert_eq!(f[i].to_bits(), half::f16::from_bits(h).to_f32().to_bits());
        if f[i].is_nan() {
            assert!(f16_bits_to_f32(b).is_nan(), "f16 {h:#x}");
        } else {
            assert_eq!(b, h, "f16 {h:#x}");
        }
    }
    // Known values.
    assert_eq!(f16_bits_to_f32(0x0001), 5.960_464_5e-8);
    assert_eq!(f16_bits_to_f32(0x7bff), 65504.0);
    assert_eq!(bf16_bits_to_f32(0x7f7f), 3.389_531_4e38);
}
