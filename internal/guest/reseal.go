package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// handleReseal makes this copy independent, in the order of docs/sandboxes.md: entropy,
// identity files, host keys and seed files, secrets, generation, token, services, interpreter. The host destroys the copy
// when any step fails, so a failed step returns at once.
func (a *Agent) handleReseal(w http.ResponseWriter, r *http.Request) {
	var req ResealRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "decoding reseal: "+err.Error())
		return
	}
	res, err := a.reseal(r.Context(), req)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

func (a *Agent) reseal(ctx context.Context, req ResealRequest) (ResealResult, error) {
	var res ResealResult
	if len(req.NewToken) < 32 || len(req.Identity.Generation) != 32 || len(req.Entropy) < 32 {
		return res, fmt.Errorf("reseal needs a token, a 32-hex-digit generation and 32 bytes of entropy")
	}
	if req.HostTime.IsZero() {
		return res, fmt.Errorf("reseal needs the host's time (host_time)")
	}
	st := newStepTimer(&res)
	if err := checkClock(req.HostTime, &res); err != nil {
		return res, err
	}
	st.done("clock")
	res.EntropyCredited = addEntropy(req.Entropy)
	st.done("entropy")
	if err := a.writeIdentityFiles(req.Identity.Hostname, req.MachineID); err != nil {
		return res, err
	}
	st.done("identity")
	var err error
	if res.HostSecrets, err = a.renewHostSecrets(ctx); err != nil {
		return res, err
	}
	st.done("host_keys")
	if err := a.writeSecrets(req.Secrets); err != nil {
		return res, err
	}
	st.done("secrets")
	if err := a.publishIdentity(req.Identity); err != nil {
		return res, err
	}
	st.done("generation")
	a.mu.Lock()
	a.token, a.identity = req.NewToken, req.Identity
	a.mu.Unlock()
	st.done("token")
	svc, err := a.services.onFork(ctx)
	res.Services = svc
	if err != nil {
		return res, err
	}
	st.done("services")
	a.interp.setReseed(req.Entropy)
	st.done("interpreter")
	if res.Interfaces, err = Interfaces(); err != nil {
		return res, err
	}
	st.done("network")
	res.Generation = req.Identity.Generation
	res.EntropySample = make([]byte, 32)
	if _, err := rand.Read(res.EntropySample); err != nil {
		return res, fmt.Errorf("sampling entropy: %w", err)
	}
	st.done("sample")
	return res, nil
}

// ClockTolerance is how far the guest's wall clock may be from the host's at reseal before the
// agent sets it. The offset is measured against ResealRequest.HostTime, stamped when the host
// built the request, so it includes the request's transit (milliseconds here).
const ClockTolerance = time.Second

// setWallClock sets CLOCK_REALTIME (clock_settime(2); needs CAP_SYS_TIME, and gVisor refuses it
// with EPERM: its wall clock is the host's). A variable so tests can watch it.
var setWallClock = func(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// checkClock records the guest's wall clock minus hostTime in res.ClockOffset and, when that is
// more than ClockTolerance either way, sets the wall clock to hostTime (plus the time since
// the check) and sets res.ClockCorrected. It returns an error, which fails the reseal, when a
// clock that is off cannot be set: a copy with a wrong wall clock is not handed out. The
// monotonic clock is never touched (docs/sandboxes.md, "Clock policy").
func checkClock(hostTime time.Time, res *ResealResult) error {
	checked := time.Now()
	res.ClockOffset = timeNow().Sub(hostTime)
	if res.ClockOffset.Abs() <= ClockTolerance {
		return nil
	}
	if err := setWallClock(hostTime.Add(time.Since(checked))); err != nil {
		return fmt.Errorf("guest wall clock is off by %v (tolerance %v) and cannot be set: %w", res.ClockOffset, ClockTolerance, err)
	}
	res.ClockCorrected = true
	return nil
}

// stepTimer records how long each reseal step took into ResealResult.Steps.
type stepTimer struct {
	res  *ResealResult
	last time.Time
}

func newStepTimer(res *ResealResult) *stepTimer {
	res.Steps = map[string]time.Duration{}
	return &stepTimer{res: res, last: time.Now()}
}

func (s *stepTimer) done(step string) {
	now := time.Now()
	s.res.Steps[step] = now.Sub(s.last)
	s.last = now
}

// addEntropy mixes b into the kernel pool and reports whether the kernel credited it
// (RNDADDENTROPY). Writing /dev/urandom mixes without credit; gVisor accepts and ignores both
// because its getrandom asks the host on every call.
func addEntropy(b []byte) bool {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	_, _ = f.Write(b)
	type randPoolInfo struct {
		entropyCount int32
		bufSize      int32
		buf          [64]byte
	}
	var info randPoolInfo
	n := copy(info.buf[:], b)
	info.entropyCount, info.bufSize = int32(n*8), int32(n)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info)))
	return errno == 0
}

// writeIdentityFiles sets the hostname and writes /etc/hostname and /etc/machine-id
// (machineID: 32 hex digits).
func (a *Agent) writeIdentityFiles(hostname, machineID string) error {
	if err := os.MkdirAll(a.path("/etc"), 0o755); err != nil {
		return fmt.Errorf("making /etc: %w", err)
	}
	if hostname != "" {
		if os.Getpid() == 1 { // only PID 1 owns a UTS namespace (Boot refuses a Root of / otherwise)
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				a.log.Warn("setting hostname", "err", err) // runsc already applied the bundle's
			}
		}
		if err := writeAtomic(a.path("/etc/hostname"), []byte(hostname+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing hostname: %w", err)
		}
	}
	if _, err := hex.DecodeString(machineID); err != nil || len(machineID) != 32 {
		return fmt.Errorf("machine id %q is not 32 hex digits", machineID)
	}
	if err := writeAtomic(a.path("/etc/machine-id"), []byte(machineID+"\n"), 0o444); err != nil {
		return fmt.Errorf("writing machine-id: %w", err)
	}
	return nil
}

// handleSecrets writes a created sandbox's secrets (a restored copy gets them in its reseal).
func (a *Agent) handleSecrets(w http.ResponseWriter, r *http.Request) {
	var req SecretsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "decoding secrets: malformed body") // the decoder's message may quote the body
		return
	}
	if err := a.writeSecrets(req.Secrets); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeSecrets replaces the contents of SecretsDir (under Config.Root) with secrets. Its
// errors name secrets, never values.
func (a *Agent) writeSecrets(secrets map[string][]byte) error {
	dir := a.path(SecretsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", SecretsDir, err)
	}
	old, _ := os.ReadDir(dir)
	for _, e := range old {
		if _, keep := secrets[e.Name()]; !keep {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for name, val := range secrets {
		if name == "" || name != filepath.Base(name) || name[0] == '.' {
			return fmt.Errorf("bad secret name %q", name)
		}
		if err := writeAtomic(filepath.Join(dir, name), val, 0o400); err != nil {
			return fmt.Errorf("writing secret %q: %w", name, err)
		}
	}
	return nil
}

// publishIdentity writes the generation and identity files atomically, generation last, so a
// process that sees a new generation finds the matching identity.
func (a *Agent) publishIdentity(id Identity) error {
	if err := os.MkdirAll(a.cfg.RunDir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", a.cfg.RunDir, err)
	}
	b, _ := json.MarshalIndent(id, "", "  ")
	if err := writeAtomic(filepath.Join(a.cfg.RunDir, "identity.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("publishing identity: %w", err)
	}
	if err := writeAtomic(filepath.Join(a.cfg.RunDir, "generation"), []byte(id.Generation), 0o644); err != nil {
		return fmt.Errorf("publishing generation: %w", err)
	}
	return nil
}

func writeAtomic(p string, data []byte, perm os.FileMode) error {
	return writeFileAtomic(p, bytes.NewReader(data), perm)
}

// Interfaces returns the network interfaces of the calling process's network stack other than
// loopback, with their MACs and addresses (netlink, as `ip addr` reads them: gVisor has no
// /sys/class/net).
func Interfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var out []Interface
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			continue
		}
		it := Interface{Name: i.Name, MAC: i.HardwareAddr.String(), Addrs: []string{}}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("listing the addresses of %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			it.Addrs = append(it.Addrs, a.String())
		}
		out = append(out, it)
	}
	return out, nil
}
