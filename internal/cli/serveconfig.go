//go:build linux

package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"

	"github.com/zygo-run/zygo/internal/trusted"
)

// DefaultConfigFile is the daemon's configuration file, read by `zygo serve` when it exists
// and --config is not given.
const DefaultConfigFile = "/etc/zygo/config.toml"

// configFlag names the flag of `zygo serve` that points at its configuration file.
const configFlag = "config"

// envOverrides are keys an environment variable sets too, which wins over the file as the
// flag does: the state dir, which every client command also finds through $ZYGO_STATE_DIR.
var envOverrides = map[string]string{"state-dir": "ZYGO_STATE_DIR"}

// notConfigKeys are flags of `zygo serve` that a configuration file cannot set: the file's own
// path, help, and the client-only --addr and --ca it inherits from the root command.
var notConfigKeys = []string{configFlag, "help", "addr", "ca"}

// applyServeConfig sets the flags of fs (zygo serve's, parsed from the command line) from the
// TOML file at path: each top-level key is a long flag name (`run-tmpfs-mib = 512`,
// `network-dns = ["1.1.1.1"]`, `debug = true`), so every flag serve has, now or later, is a
// key without a list kept by hand. A flag given on the command line wins over the file, and so
// does $ZYGO_STATE_DIR over state-dir (envOverrides). The
// value's TOML type must fit the flag: a boolean for a boolean flag, an integer for a number,
// an array of strings for a list, a string for the rest (a duration as "90s").
//
// The file and each directory above it must be owned by root (or the daemon's uid) and
// writable by neither group nor others (trusted.File): what it names, root runs.
//
// path "" means DefaultConfigFile when it exists (nothing to do otherwise); a path given with
// --config must exist. Errors name the file and the key: an unknown key, a table, a value of
// the wrong type or one the flag refuses.
func applyServeConfig(flags *pflag.FlagSet, path string) error {
	explicit := path != ""
	if !explicit {
		path = DefaultConfigFile
	}
	if _, err := os.Stat(path); !explicit && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("reading the config file: %w", err)
	}
	if _, err := os.Stat(abs); err == nil {
		// What it names (runsc, bwrap, ...) root runs: only root may change it.
		if err := trusted.File(abs, os.Geteuid()); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return fmt.Errorf("reading the config file: %w", err)
	}
	var kv map[string]any
	if _, err := toml.Decode(string(data), &kv); err != nil {
		return fmt.Errorf("config file %s: %w", path, tomlError{err})
	}
	for _, key := range sortedKeys(kv) {
		if err := setFromConfig(flags, key, kv[key]); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
	}
	return nil
}

// setFromConfig sets flag key of fs to the TOML value v unless the command line set it.
func setFromConfig(flags *pflag.FlagSet, key string, v any) error {
	f := flags.Lookup(key)
	if f == nil || slices.Contains(notConfigKeys, key) {
		return fmt.Errorf("unknown key %q (the keys are zygo serve's long flag names: %s)", key, strings.Join(ConfigKeys(flags), ", "))
	}
	if f.Changed || os.Getenv(envOverrides[key]) != "" {
		return nil // the command line (or its variable) overrides the file
	}
	typ := f.Value.Type()
	if sv, ok := f.Value.(pflag.SliceValue); ok && strings.HasSuffix(typ, "Slice") {
		list, ok := v.([]any)
		strs := make([]string, 0, len(list))
		for _, e := range list {
			s, isStr := e.(string)
			ok = ok && isStr
			strs = append(strs, s)
		}
		if !ok {
			return fmt.Errorf("%s: must be an array of strings (for example %s = [\"a\", \"b\"])", key, key)
		}
		if err := sv.Replace(strs); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		f.Changed = true
		return nil
	}
	s, err := configString(typ, v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := flags.Set(key, s); err != nil {
		return fmt.Errorf("%s: %q is not a valid value: %w", key, s, err)
	}
	return nil
}

// configString renders the TOML value v as the command-line text of a flag of pflag type typ,
// or says which TOML type it must be.
func configString(typ string, v any) (string, error) {
	switch typ {
	case "bool":
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), nil
		}
		return "", errors.New("must be true or false")
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), nil
		}
		return "", errors.New("must be an integer")
	case "float32", "float64":
		switch n := v.(type) {
		case float64:
			return strconv.FormatFloat(n, 'g', -1, 64), nil
		case int64:
			return strconv.FormatInt(n, 10), nil
		}
		return "", errors.New("must be a number")
	case "duration":
		if s, ok := v.(string); ok {
			return s, nil
		}
		return "", fmt.Errorf("must be a duration as a string (for example %q)", (90 * time.Second).String())
	default:
		if s, ok := v.(string); ok {
			return s, nil
		}
		if _, ok := v.(map[string]any); ok {
			return "", errors.New("is a table, but the keys are top-level: zygo serve's long flag names")
		}
		return "", errors.New("must be a string")
	}
}

// ConfigKeys returns the keys a configuration file of `zygo serve` may hold, sorted: the long
// names of the flags in fs but notConfigKeys.
func ConfigKeys(fs *pflag.FlagSet) []string {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(notConfigKeys, f.Name) {
			keys = append(keys, f.Name)
		}
	})
	slices.Sort(keys)
	return keys
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// tomlError is the toml package's error as one clause: without its "toml: " prefix and its
// closing period. It unwraps to the package's error.
type tomlError struct{ err error }

func (e tomlError) Error() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.err.Error(), "toml: "), ".")
}

func (e tomlError) Unwrap() error { return e.err }
