package hostid_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/store"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A range that holds an account's id, or overlaps a subordinate range, is
// refused with a message naming the file and the entry; a clean one passes.
func TestCheckRefusesARangeInUse(t *testing.T) {
	r := store.IDRange{First: 200000, Count: 65536}
	clean := hostid.HostFiles{
		Passwd: write(t, "passwd", "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/sbin/nologin\n"),
		Group:  write(t, "group", "root:x:0:\n"),
		SubUID: write(t, "subuid", "alice:100000:65536\n"),
		SubGID: write(t, "subgid", "# none\n"),
	}
	if err := hostid.Check(r, clean); err != nil {
		t.Fatalf("a clean range: %v", err)
	}
	cases := map[string]func(f *hostid.HostFiles){
		"passwd": func(f *hostid.HostFiles) { f.Passwd = write(t, "passwd", "svc:x:200007:100::/:/sbin/nologin\n") },
		"group":  func(f *hostid.HostFiles) { f.Group = write(t, "group", "svc:x:265535:\n") },
		"subuid": func(f *hostid.HostFiles) { f.SubUID = write(t, "subuid", "bob:150000:60000\n") },
		"subgid": func(f *hostid.HostFiles) { f.SubGID = write(t, "subgid", "bob:265535:10\n") },
	}
	for name, mutate := range cases {
		f := clean
		mutate(&f)
		err := hostid.Check(r, f)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "--uid-range") {
			t.Errorf("%s entry in the range: %v", name, err)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]store.IDRange{
		"200000-200009": {First: 200000, Count: 10},
		"200000:10":     {First: 200000, Count: 10},
	} {
		if got, err := hostid.Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "10", "5-4", "1:0", "0-10", "65000-66000", "x-9", "4294967000:1000"} {
		if _, err := hostid.Parse(bad); err == nil || !strings.Contains(err.Error(), "--uid-range") {
			t.Errorf("Parse(%q): %v, want an error naming --uid-range", bad, err)
		}
	}
	if err := hostid.Check(hostid.Default, hostid.SystemFiles); err != nil {
		t.Errorf("the default range on this host: %v", err)
	}
}
