package guest

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// maxAccountFileBytes bounds what the agent reads of /etc/passwd and /etc/group: code in the
// sandbox may write them.
const maxAccountFileBytes = 4 << 20

// account is a user of the sandbox's /etc/passwd, with the groups /etc/group gives it.
type account struct {
	UserInfo
	Groups []uint32 // supplementary gids
}

// errNoSuchUser wraps fs.ErrInvalid: a user the request names that /etc/passwd lacks is the
// request's fault.
type errNoSuchUser struct{ name string }

func (e *errNoSuchUser) Error() string {
	return fmt.Sprintf("user %q: no such user in the sandbox's /etc/passwd", e.name)
}
func (e *errNoSuchUser) Unwrap() error { return fs.ErrInvalid }

// rootAccount is root when /etc/passwd does not say otherwise.
var rootAccount = account{UserInfo: UserInfo{Name: "root", Home: "/root"}}

// readAccountFile returns the colon-separated records of an /etc/passwd-like file under the
// agent's root, at most maxAccountFileBytes of it; a missing file has none.
func (a *Agent) readAccountFile(p string) ([][]string, error) {
	// O_NONBLOCK: a FIFO put there must not hold the agent.
	f, err := os.OpenFile(a.path(p), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("reading %s: not a regular file: %w", p, fs.ErrInvalid)
	}
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFileBytes))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, sc.Err()
}

// lookupUser returns the account named name ("" is root). It returns an error wrapping
// fs.ErrInvalid (errNoSuchUser) when /etc/passwd has no such user.
func (a *Agent) lookupUser(name string) (account, error) {
	if name == "" {
		name = "root"
	}
	recs, err := a.readAccountFile("/etc/passwd")
	if err != nil {
		return account{}, err
	}
	var acc account
	found := false
	for _, r := range recs {
		if len(r) < 7 || r[0] != name {
			continue
		}
		uid, err1 := strconv.ParseUint(r[2], 10, 32)
		gid, err2 := strconv.ParseUint(r[3], 10, 32)
		if err1 != nil || err2 != nil {
			return account{}, fmt.Errorf("user %q: malformed /etc/passwd line: %w", name, fs.ErrInvalid)
		}
		acc = account{UserInfo: UserInfo{Name: name, UID: uint32(uid), GID: uint32(gid), Home: r[5]}}
		found = true
		break
	}
	if !found {
		if name == "root" {
			return rootAccount, nil
		}
		return account{}, &errNoSuchUser{name: name}
	}
	if acc.Home == "" {
		acc.Home = "/"
	}
	groups, err := a.readAccountFile("/etc/group")
	if err != nil {
		return account{}, err
	}
	for _, g := range groups {
		if len(g) < 4 {
			continue
		}
		gid, err := strconv.ParseUint(g[2], 10, 32)
		if err != nil || uint32(gid) == acc.GID {
			continue
		}
		for m := range strings.SplitSeq(g[3], ",") {
			if m == name {
				acc.Groups = append(acc.Groups, uint32(gid))
				break
			}
		}
	}
	return acc, nil
}

// idNames maps uids and gids to the names /etc/passwd and /etc/group give them.
type idNames struct{ users, groups map[uint32]string }

// loadIDNames reads the names of the sandbox's users and groups; unreadable files give none.
func (a *Agent) loadIDNames() idNames {
	n := idNames{users: map[uint32]string{}, groups: map[uint32]string{}}
	fill := func(p string, m map[uint32]string) {
		recs, _ := a.readAccountFile(p)
		for _, r := range recs {
			if len(r) < 3 {
				continue
			}
			if id, err := strconv.ParseUint(r[2], 10, 32); err == nil {
				if _, ok := m[uint32(id)]; !ok {
					m[uint32(id)] = r[0]
				}
			}
		}
	}
	fill("/etc/passwd", n.users)
	fill("/etc/group", n.groups)
	return n
}

func (n idNames) user(id uint32) string  { return nameOr(n.users, id) }
func (n idNames) group(id uint32) string { return nameOr(n.groups, id) }

func nameOr(m map[uint32]string, id uint32) string {
	if s, ok := m[id]; ok {
		return s
	}
	return strconv.FormatUint(uint64(id), 10)
}

// queryUser is the account of the request's ?user= parameter, or nil (the agent, root) when
// it has none. An unknown user is an error wrapping fs.ErrInvalid.
func (a *Agent) queryUser(r *http.Request) (*account, error) {
	name := r.URL.Query().Get("user")
	if name == "" {
		return nil, nil
	}
	acc, err := a.lookupUser(name)
	if err != nil {
		return nil, err
	}
	return &acc, nil
}
