// SPDX-License-Identifier: MIT OR Apache-2.0
//
// linerate's steering XDP program: redirects to the queue's AF_XDP socket only
// the frames linerate owns and passes everything else to the kernel's stack.
//
// Owned, in the order they are looked for:
//   * IPv4/IPv6 to an address of linerate's own (`addrs`; not a shared one);
//     ARP whose target protocol address is one, and neighbour solicitations
//     whose target address is one;
//   * TCP/UDP whose exact 4-tuple is in `flows` (IPv4 and IPv6);
//   * TCP/UDP to a local port in `ports` (listeners, bound UDP sockets, a
//     VTEP's underlay port);
//   * ICMP/ICMPv6 errors quoting a segment linerate sent (the quoted source is
//     linerate's side: its 4-tuple in `flows`, or its port in `ports`);
//   * IPv4/IPv6 fragments after the first, of a datagram whose first fragment
//     was owned (the first one records the datagram in `frags`).
//
// Everything else, and everything it cannot parse (VLAN tags, truncated
// headers), goes to the kernel (XDP_PASS): the program never drops. An owned
// frame on a queue with no socket in `xsks` goes to the kernel too
// (bpf_redirect_map's default action). `counts` says which rule decided.
//
// Built by crates/nic/build.rs with `clang -target bpf`; self-contained (no
// kernel or libbpf headers) so that clang is the only build requirement. The
// key layouts are mirrored in steer.rs.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define INLINE static inline __attribute__((always_inline))

// Byte order: the program runs little-endian (x86-64, arm64 hosts).
#define bpf_htons(x) ((__u16)__builtin_bswap16(x))
#define bpf_ntohs(x) ((__u16)__builtin_bswap16(x))

enum xdp_action { XDP_ABORTED = 0, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT };

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_XSKMAP = 17,
};
#define BPF_ANY 0

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

// Helpers by number (include/uapi/linux/bpf.h, ___BPF_FUNC_MAPPER).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   __u64 flags) = (void *)2;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;
static long (*bpf_xdp_adjust_meta)(struct xdp_md *ctx, int delta) = (void *)54;

// The RSS hash the device computed (a kfunc, kernel 6.3 on; veth, mlx5, ice
// and others implement it). Only a device-bound program (BPF_F_XDP_DEV_BOUND_ONLY
// and the device's ifindex at load) may call it. Weak: where the kernel lacks
// it, libbpf leaves it null and the call below is dead code the verifier drops.
// Any enum matches the kernel's `enum xdp_rss_hash_type *` (libbpf compares
// kinds).
enum xdp_rss_hash_type { XDP_RSS_TYPE_NONE = 0 };
extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash,
				    enum xdp_rss_hash_type *rss_type)
	__attribute__((section(".ksyms"), weak));

// What the program leaves in front of a redirected frame (the metadata area,
// copied into the UMEM before the frame): mirrored in steer.rs (RxMeta).
#define META_MAGIC 0x6c724d31 // "lrM1"
struct rx_meta {
	__u32 hash;
	__u32 hash_type;
	__u32 magic;
};

#define ETH_P_IP 0x0800
#define ETH_P_ARP 0x0806
#define ETH_P_IPV6 0x86DD
#define IPPROTO_HOPOPTS 0
#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_ICMPV6 58
#define IPPROTO_DSTOPTS 60

#define FAMILY_V4 4
#define FAMILY_V6 6

// Key layouts: every field a whole number of bytes, no implicit padding, ports
// and addresses in network byte order as on the wire.
struct port_key {
	__u8 proto;
	__u8 pad;
	__u16 port;
};

struct flow_key {
	__u8 proto;
	__u8 family;
	__u16 local_port;
	__u16 remote_port;
	__u16 pad;
	__u8 local[16];
	__u8 remote[16];
};

struct addr_key {
	__u8 family;
	__u8 pad[3];
	__u8 addr[16];
};

struct frag_key {
	__u8 family;
	__u8 proto;
	__u16 pad;
	__u32 id;
	__u8 src[16];
	__u8 dst[16];
};

// Which rule decided (indices of `counts`; mirrored in steer.rs).
enum {
	C_PASS = 0,     // not linerate's: to the kernel
	C_PORT,         // to a port of `ports`
	C_FLOW,         // to a 4-tuple of `flows`
	C_ICMP,         // an ICMP error quoting linerate's segment
	C_ARP,          // ARP for linerate's own address
	C_ND,           // neighbour solicitation for linerate's own address
	C_ADDR,         // IP to linerate's own address
	C_FRAG,         // a later fragment of an owned datagram
	C_NO_SOCKET,    // owned, but the queue has no socket: to the kernel
	C_MALFORMED,    // headers cut short: to the kernel
	C_COUNT,
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct port_key);
	__type(value, __u32);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, __u32);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct addr_key);
	__type(value, __u32);
} addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct frag_key);
	__type(value, __u32);
} frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

INLINE void count(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &what);
	if (c)
		*c += 1;
}

INLINE int pass(__u32 why)
{
	count(why);
	return XDP_PASS;
}

// Reads the device's RSS hash into the frame's metadata area. Every frame
// redirected gets the area (magic set), with `hash_type` META_NO_HASH where
// the device had no hash for it: the UMEM frame's bytes before the frame are
// then never a stale hash of an earlier frame.
#define META_NO_HASH 0xffffffff
INLINE void rx_hash_meta(struct xdp_md *ctx)
{
	__u32 hash = 0;
	__u32 kind = META_NO_HASH;
	enum xdp_rss_hash_type type = XDP_RSS_TYPE_NONE;
	if (bpf_xdp_metadata_rx_hash && bpf_xdp_metadata_rx_hash(ctx, &hash, &type) == 0)
		kind = (__u32)type;
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct rx_meta)) != 0)
		return;
	struct rx_meta *m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return;
	m->hash = hash;
	m->hash_type = kind;
	m->magic = META_MAGIC;
}

INLINE int to_linerate(struct xdp_md *ctx, __u32 why, int hash)
{
	if (hash)
		rx_hash_meta(ctx);
	int action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(action == XDP_REDIRECT ? why : C_NO_SOCKET);
	return action;
}

INLINE int own_addr(__u8 family, const void *addr)
{
	struct addr_key k = { .family = family };
	__builtin_memcpy(k.addr, addr, family == FAMILY_V4 ? 4 : 16);
	return bpf_map_lookup_elem(&addrs, &k) != 0;
}

// Whether linerate owns the TCP/UDP 4-tuple (local side first), by flow or by
// local port.
INLINE __u32 owned(__u8 proto, __u8 family, const void *local, const void *remote,
		   __u16 local_port, __u16 remote_port)
{
	struct flow_key f = {
		.proto = proto,
		.family = family,
		.local_port = local_port,
		.remote_port = remote_port,
	};
	if (family == FAMILY_V4) {
		__builtin_memcpy(f.local, local, 4);
		__builtin_memcpy(f.remote, remote, 4);
	} else {
		__builtin_memcpy(f.local, local, 16);
		__builtin_memcpy(f.remote, remote, 16);
	}
	if (bpf_map_lookup_elem(&flows, &f))
		return C_FLOW;
	struct port_key p = { .proto = proto, .port = local_port };
	if (bpf_map_lookup_elem(&ports, &p))
		return C_PORT;
	return C_PASS;
}

INLINE void remember_frag(__u8 family, __u8 proto, __u32 id, const void *src,
			  const void *dst)
{
	struct frag_key k = { .family = family, .proto = proto, .id = id };
	__u32 one = 1;
	__builtin_memcpy(k.src, src, family == FAMILY_V4 ? 4 : 16);
	__builtin_memcpy(k.dst, dst, family == FAMILY_V4 ? 4 : 16);
	bpf_map_update_elem(&frags, &k, &one, BPF_ANY);
}

INLINE int frag_owned(__u8 family, __u8 proto, __u32 id, const void *src, const void *dst)
{
	struct frag_key k = { .family = family, .proto = proto, .id = id };
	__builtin_memcpy(k.src, src, family == FAMILY_V4 ? 4 : 16);
	__builtin_memcpy(k.dst, dst, family == FAMILY_V4 ? 4 : 16);
	return bpf_map_lookup_elem(&frags, &k) != 0;
}

struct iphdr4 {
	__u8 ver_ihl;
	__u8 tos;
	__u16 tot_len;
	__u16 id;
	__u16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u8 saddr[4];
	__u8 daddr[4];
};

struct iphdr6 {
	__u32 ver_tc_flow;
	__u16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

// An ICMPv4 error: the quoted IPv4 header and the first 8 bytes of what
// follows it (RFC 792), where linerate's side is the quoted source.
INLINE __u32 icmp4_quote(void *q, void *end)
{
	struct iphdr4 *ip = q;
	if ((void *)(ip + 1) > end)
		return C_MALFORMED;
	__u32 ihl = (ip->ver_ihl & 0x0f) * 4;
	if (ihl < sizeof(*ip) || (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP))
		return C_PASS;
	__u16 *ports = q + ihl;
	if ((void *)(ports + 2) > end)
		return C_MALFORMED;
	__u32 r = owned(ip->protocol, FAMILY_V4, ip->saddr, ip->daddr, ports[0], ports[1]);
	return r == C_PASS ? C_PASS : C_ICMP;
}

INLINE __u32 icmp6_quote(void *q, void *end)
{
	struct iphdr6 *ip = q;
	if ((void *)(ip + 1) > end)
		return C_MALFORMED;
	if (ip->nexthdr != IPPROTO_TCP && ip->nexthdr != IPPROTO_UDP)
		return C_PASS;
	__u16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return C_MALFORMED;
	__u32 r = owned(ip->nexthdr, FAMILY_V6, ip->saddr, ip->daddr, ports[0], ports[1]);
	return r == C_PASS ? C_PASS : C_ICMP;
}

INLINE __u32 ipv4(void *l3, void *end)
{
	struct iphdr4 *ip = l3;
	if ((void *)(ip + 1) > end)
		return C_MALFORMED;
	if (own_addr(FAMILY_V4, ip->daddr))
		return C_ADDR;
	__u32 ihl = (ip->ver_ihl & 0x0f) * 4;
	if (ihl < sizeof(*ip))
		return C_MALFORMED;
	__u16 frag = bpf_ntohs(ip->frag_off);
	if (frag & 0x1fff)
		return frag_owned(FAMILY_V4, ip->protocol, ip->id, ip->saddr, ip->daddr) ? C_FRAG
											  : C_PASS;
	void *l4 = l3 + ihl;
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		__u16 *ports = l4;
		if ((void *)(ports + 2) > end)
			return C_MALFORMED;
		__u32 r = owned(ip->protocol, FAMILY_V4, ip->daddr, ip->saddr, ports[1], ports[0]);
		if (r != C_PASS && (frag & 0x2000))
			remember_frag(FAMILY_V4, ip->protocol, ip->id, ip->saddr, ip->daddr);
		return r;
	}
	if (ip->protocol == IPPROTO_ICMP) {
		__u8 *icmp = l4;
		if ((void *)(icmp + 8) > end)
			return C_MALFORMED;
		// Destination unreachable, time exceeded, parameter problem.
		if (icmp[0] == 3 || icmp[0] == 11 || icmp[0] == 12)
			return icmp4_quote(icmp + 8, end);
	}
	return C_PASS;
}

struct frag6 {
	__u8 nexthdr;
	__u8 reserved;
	__u16 frag_off;
	__u32 id;
};

INLINE __u32 ipv6(void *l3, void *end)
{
	struct iphdr6 *ip = l3;
	if ((void *)(ip + 1) > end)
		return C_MALFORMED;
	if (own_addr(FAMILY_V6, ip->daddr))
		return C_ADDR;
	__u8 next = ip->nexthdr;
	void *at = (void *)(ip + 1);
	int first_of_many = 0;
	__u32 id = 0;
	// At most four extension headers before the transport header.
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS) {
			__u8 *ext = at;
			if ((void *)(ext + 2) > end)
				return C_MALFORMED;
			next = ext[0];
			at += ((__u32)ext[1] + 1) * 8;
		} else if (next == IPPROTO_FRAGMENT) {
			struct frag6 *f = at;
			if ((void *)(f + 1) > end)
				return C_MALFORMED;
			__u16 off = bpf_ntohs(f->frag_off);
			if (off & 0xfff8)
				return frag_owned(FAMILY_V6, f->nexthdr, f->id, ip->saddr, ip->daddr)
					       ? C_FRAG
					       : C_PASS;
			first_of_many = off & 1;
			id = f->id;
			next = f->nexthdr;
			at = (void *)(f + 1);
		} else {
			break;
		}
	}
	if (next == IPPROTO_TCP || next == IPPROTO_UDP) {
		__u16 *ports = at;
		if ((void *)(ports + 2) > end)
			return C_MALFORMED;
		__u32 r = owned(next, FAMILY_V6, ip->daddr, ip->saddr, ports[1], ports[0]);
		if (r != C_PASS && first_of_many)
			remember_frag(FAMILY_V6, next, id, ip->saddr, ip->daddr);
		return r;
	}
	if (next == IPPROTO_ICMPV6) {
		__u8 *icmp = at;
		if ((void *)(icmp + 8) > end)
			return C_MALFORMED;
		// Destination unreachable, packet too big, time exceeded, parameter problem.
		if (icmp[0] >= 1 && icmp[0] <= 4)
			return icmp6_quote(icmp + 8, end);
		// A neighbour solicitation for linerate's own address (its target).
		if (icmp[0] == 135) {
			if ((void *)(icmp + 24) > end)
				return C_MALFORMED;
			return own_addr(FAMILY_V6, icmp + 8) ? C_ND : C_PASS;
		}
	}
	return C_PASS;
}

INLINE int steer(struct xdp_md *ctx, int hash)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *eth = data;
	if ((void *)(eth + 14) > end)
		return pass(C_MALFORMED);
	__u16 proto = bpf_ntohs(*(__u16 *)(eth + 12));
	__u32 why = C_PASS;
	if (proto == ETH_P_IP) {
		why = ipv4(eth + 14, end);
	} else if (proto == ETH_P_IPV6) {
		why = ipv6(eth + 14, end);
	} else if (proto == ETH_P_ARP) {
		// Ethernet/IPv4 ARP: the target protocol address at offset 24.
		__u8 *arp = eth + 14;
		if ((void *)(arp + 28) > end)
			return pass(C_MALFORMED);
		if (own_addr(FAMILY_V4, arp + 24))
			why = C_ARP;
	}
	if (why == C_PASS || why == C_MALFORMED)
		return pass(why);
	return to_linerate(ctx, why, hash);
}

// The program as loaded for sockets that take one buffer per frame.
SEC("xdp")
int linerate_steer(struct xdp_md *ctx)
{
	return steer(ctx, 0);
}

// The same program for multi-buffer sockets (XDP_USE_SG): `xdp.frags` has
// libbpf load it with BPF_F_XDP_HAS_FRAGS, so frames over one buffer reach it
// (and the socket) whole. It reads only the first buffer (ctx->data to
// ctx->data_end), where the headers are; a frame whose headers are not all
// there goes to the kernel, as any it cannot parse.
SEC("xdp.frags")
int linerate_steer_frags(struct xdp_md *ctx)
{
	return steer(ctx, 0);
}

// The two above, device-bound, with the device's RSS hash in front of each
// frame redirected to linerate (struct rx_meta).
SEC("xdp")
int linerate_steer_hash(struct xdp_md *ctx)
{
	return steer(ctx, 1);
}

SEC("xdp.frags")
int linerate_steer_frags_hash(struct xdp_md *ctx)
{
	return steer(ctx, 1);
}

char _license[] SEC("license") = "Dual MIT/GPL";
