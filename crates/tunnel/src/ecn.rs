//! ECN through a tunnel, RFC 6040.

/// The outcome of decapsulating the ECN field (RFC 6040 section 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnDecap {
    /// Forward with this inner ECN codepoint.
    Forward(u8),
    /// Drop the packet (CE outer on a Not-ECT inner packet).
    Drop,
}

/// RFC 6040 section 4.2, figure 4: the inner packet's ECN field after
/// decapsulation, from the `inner` and `outer` two-bit ECN codepoints
/// (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
///
/// The cells the RFC marks "(!!!)" (Not-ECT inner with an ECT outer, a
/// currently-unused combination) are forwarded as the inner, as Linux does;
/// CE outer on a Not-ECT inner is dropped.
pub const fn decap_ecn(inner: u8, outer: u8) -> EcnDecap {
    let inner = inner & 3;
    match (inner, outer & 3) {
        (0, 3) => EcnDecap::Drop,
        (0, _) => EcnDecap::Forward(0),
        (_, 3) => EcnDecap::Forward(3),
        // ECT(1) outer on ECT(0) inner: ECT(1) (figure 4).
        (2, 1) => EcnDecap::Forward(1),
        (i, _) => EcnDecap::Forward(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_ECT: u8 = 0;
    const ECT1: u8 = 1;
    const ECT0: u8 = 2;
    const CE: u8 = 3;

    /// RFC 6040 section 4.2, figure 4, row by row (arriving inner header),
    /// columns Not-ECT, ECT(0), ECT(1), CE (arriving outer header).
    #[test]
    fn rfc6040_figure_4() {
        use EcnDecap::{Drop, Forward as F};
        let outer = [NOT_ECT, ECT0, ECT1, CE];
        let table = [
            (NOT_ECT, [F(NOT_ECT), F(NOT_ECT), F(NOT_ECT), Drop]),
            (ECT0, [F(ECT0), F(ECT0), F(ECT1), F(CE)]),
            (ECT1, [F(ECT1), F(ECT1), F(ECT1), F(CE)]),
            (CE, [F(CE), F(CE), F(CE), F(CE)]),
        ];
        for (inner, row) in table {
            for (o, want) in outer.iter().zip(row) {
                assert_eq!(decap_ecn(inner, *o), want, "inner {inner} outer {o}");
            }
        }
    }
}
