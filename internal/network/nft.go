package network

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The table (family inet, so that IPv6 from an endpoint meets the same
// filter) holds:
//
//	input       hook input:   iif zy* ct established,related accept
//	                          iif zy* jump dns        (per endpoint: its own host-side IP, udp 53, accept)
//	                          iif zy* reject          (every host address, loopback, the API listener)
//	forward     hook forward: oif zy* ct established,related accept
//	                          oif zy* reject          (nothing opens a connection into an endpoint)
//	                          iif zy* not ipv4 reject
//	                          iif zy* daddr in <forbidden> reject (one rule per prefix)
//	                          iif zy* jump egress
//	egress      (per endpoint: iif <veth> jump ep-<token>), then reject
//	ep-<token>  deny prefixes reject, allow prefixes accept, then accept
//	            (no allow list) or reject (an allow list); just reject
//	            when egress is off
//	postrouting hook postrouting (nat): saddr in pool, oif not zy*: masquerade
//
// Per-endpoint rules carry the endpoint's token as UserData, which is how
// Close finds them. "reject" answers TCP with a reset and the rest with
// ICMP administratively prohibited, so a refused connect fails at once.

const ifNameSize = 16

func (h *Host) table() *nftables.Table {
	return &nftables.Table{Name: h.tableName(), Family: nftables.TableFamilyINet}
}

func chainRef(t *nftables.Table, name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: t}
}

// installTable replaces the table with a fresh one (one atomic batch).
func (h *Host) installTable() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := h.table()
	if exists, err := tableExists(c, t); err != nil {
		return err
	} else if exists {
		c.DelTable(t)
	}
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	dns := c.AddChain(&nftables.Chain{Name: "dns", Table: t})
	egress := c.AddChain(&nftables.Chain{Name: "egress", Table: t})

	iif, oif := ifPrefix(unix.NFT_META_IIFNAME, h.vethPrefix()), ifPrefix(unix.NFT_META_OIFNAME, h.vethPrefix())
	add := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	// The pool's host-side addresses (the DNS forwarders) answer endpoints
	// only: nothing arriving on another interface reaches them (an outside
	// host routing to the pool would find an open resolver), bar the host's
	// own loopback.
	add(input, ifPrefixNot(unix.NFT_META_IIFNAME, h.vethPrefix()), ifExactNot(unix.NFT_META_IIFNAME, "lo"),
		isIPv4(), daddrIn(h.cfg.Pool), reject())
	add(input, iif, ctEstablished(), verdict(expr.VerdictAccept, ""))
	add(input, iif, verdict(expr.VerdictJump, dns.Name))
	add(input, iif, reject())
	add(forward, oif, ctEstablished(), verdict(expr.VerdictAccept, ""))
	add(forward, oif, reject())
	add(forward, iif, notIPv4(), reject())
	for _, p := range h.forbidden {
		add(forward, iif, isIPv4(), daddrIn(p), reject())
	}
	add(forward, iif, verdict(expr.VerdictJump, egress.Name))
	add(egress, reject())
	add(post, isIPv4(), saddrIn(h.cfg.Pool), ifPrefixNot(unix.NFT_META_OIFNAME, h.vethPrefix()), []expr.Any{&expr.Masq{}})
	return c.Flush()
}

func tableExists(c *nftables.Conn, t *nftables.Table) (bool, error) {
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, x := range tables {
		if x.Name == t.Name {
			return true, nil
		}
	}
	return false, nil
}

// deleteTable removes the table if it is there.
func (h *Host) deleteTable() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := h.table()
	if exists, err := tableExists(c, t); err != nil || !exists {
		return err
	}
	c.DelTable(t)
	return c.Flush()
}

// addEndpointRules installs ep's chain and its jumps (one batch).
func (h *Host) addEndpointRules(ep *Endpoint) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := h.table()
	tag := []byte(ep.token)
	ch := c.AddChain(&nftables.Chain{Name: "ep-" + ep.token, Table: t})
	rule := func(chain *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: all, UserData: tag})
	}
	if ep.spec.Egress {
		for _, p := range ep.spec.Deny {
			rule(ch, isIPv4(), daddrIn(p), reject())
		}
		for _, p := range ep.spec.Allow {
			rule(ch, isIPv4(), daddrIn(p), verdict(expr.VerdictAccept, ""))
		}
	}
	if ep.spec.Egress && len(ep.spec.Allow) == 0 {
		rule(ch, verdict(expr.VerdictAccept, ""))
	} else {
		rule(ch, reject())
	}
	iif := ifExact(unix.NFT_META_IIFNAME, ep.hostIf)
	c.InsertRule(&nftables.Rule{Table: t, Chain: chainRef(t, "egress"), UserData: tag,
		Exprs: append(append([]expr.Any{}, iif...), verdict(expr.VerdictJump, ch.Name)...)})
	rule(chainRef(t, "dns"), iif, isIPv4(), daddrIn(netip.PrefixFrom(ep.hostIP, 32)), udpDport(53), verdict(expr.VerdictAccept, ""))
	return c.Flush()
}

// deleteEndpointRules removes ep's jumps and chain; rules already gone are
// not an error.
func (h *Host) deleteEndpointRules(token string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := h.table()
	if exists, err := tableExists(c, t); err != nil || !exists {
		return err
	}
	for _, name := range []string{"egress", "dns"} {
		rules, err := c.GetRules(t, chainRef(t, name))
		if err != nil {
			return fmt.Errorf("listing chain %s: %w", name, err)
		}
		for _, r := range rules {
			if string(r.UserData) == token {
				if err := c.DelRule(r); err != nil {
					return err
				}
			}
		}
	}
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return err
	}
	for _, ch := range chains {
		if ch.Table.Name == t.Name && ch.Name == "ep-"+token {
			c.FlushChain(ch)
			c.DelChain(ch)
		}
	}
	return c.Flush()
}

func verdict(kind expr.VerdictKind, chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: kind, Chain: chain}}
}

func reject() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
}

func ifPrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

func ifPrefixNot(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(prefix)},
	}
}

func ifExactNot(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: b},
	}
}

func ifExact(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func isIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func notIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	p = p.Masked()
	mask := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	a := p.Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	}
}

func daddrIn(p netip.Prefix) []expr.Any { return addrIn(16, p) }
func saddrIn(p netip.Prefix) []expr.Any { return addrIn(12, p) }

func udpDport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}
