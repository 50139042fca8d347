package zygo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// IgnoreFile is the file at the top of a function directory that lists what PackDir leaves
// out of the bundle, in a subset of .gitignore's syntax:
//
//   - one pattern a line; blank lines and lines starting with # are skipped; trailing spaces
//     are trimmed; \# and \! start a pattern with that character;
//   - !PATTERN takes back what an earlier pattern (or a default, DefaultIgnores) left out;
//   - PATTERN/ matches directories only;
//   - a pattern with a / at its start or in its middle is anchored at the function directory
//     (/build, lib/*.so); one without matches a name at any depth (*.pyc, tests);
//   - *, ? and [a-z] match within one name (path.Match); ** as a whole name matches any
//     number of directories (docs/**/*.md);
//   - the last pattern that matches a path decides; a directory left out is not entered, so
//     nothing below it can be taken back (as in git).
//
// Not supported (gitignore has them): .zygoignore files below the top, and trailing-space
// escapes. zygo.toml is always packed, and directories named .git never are.
const IgnoreFile = ".zygoignore"

// DefaultIgnores are left out of every bundle before IgnoreFile is read: what a host's tools
// make inside a function directory that the sandbox cannot use (byte code of another Python,
// a virtual environment bound to the host's paths, packages installed for the host). A
// function that ships its own node_modules names it in IgnoreFile with !node_modules/.
var DefaultIgnores = []string{"__pycache__/", ".venv/", "node_modules/"}

// ignoreRule is one parsed pattern.
type ignoreRule struct {
	negate   bool
	dirOnly  bool
	anchored bool     // matched from the function directory, not at any depth
	parts    []string // the pattern split at "/"
}

// ignoreRules is a parsed IgnoreFile after DefaultIgnores.
type ignoreRules []ignoreRule

// loadIgnore reads dir's IgnoreFile (none is fine) after DefaultIgnores. Errors name the file
// and the line of a pattern path.Match cannot use.
func loadIgnore(dir string) (ignoreRules, error) {
	rules, err := parseIgnore(strings.Join(DefaultIgnores, "\n"), "defaults")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, IgnoreFile))
	if errors.Is(err, os.ErrNotExist) {
		return rules, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", IgnoreFile, err)
	}
	more, err := parseIgnore(string(data), IgnoreFile)
	if err != nil {
		return nil, err
	}
	return append(rules, more...), nil
}

// parseIgnore parses patterns in IgnoreFile's syntax; from names their source in errors.
func parseIgnore(text, from string) (ignoreRules, error) {
	var rules ignoreRules
	sc := bufio.NewScanner(bytes.NewReader([]byte(text)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r ignoreRule
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		} else if strings.HasPrefix(line, `\#`) || strings.HasPrefix(line, `\!`) {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		r.anchored = strings.Contains(line, "/")
		line = strings.TrimPrefix(line, "/")
		if line == "" {
			continue // "/" or "!": matches nothing
		}
		r.parts = strings.Split(line, "/")
		for _, p := range r.parts {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("%s line %d: %q is not a valid pattern: %w", from, n, sc.Text(), err)
			}
		}
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

// ignored reports whether the path rel (slash-separated, relative to the function directory)
// is left out: the last rule that matches it decides.
func (rs ignoreRules) ignored(rel string, isDir bool) bool {
	if rel == "zygo.toml" {
		return false
	}
	name := strings.Split(rel, "/")
	out := false
	for _, r := range rs {
		if r.dirOnly && !isDir {
			continue
		}
		var hit bool
		if r.anchored {
			hit = matchParts(r.parts, name)
		} else {
			hit = matchParts(r.parts, name[len(name)-1:])
		}
		if hit {
			out = !r.negate
		}
	}
	return out
}

// matchParts matches a pattern's names against a path's, ** standing for any number of names.
func matchParts(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchParts(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], name[0])
	return ok && matchParts(pat[1:], name[1:])
}

// Packed reports whether PackDir would put the entry rel (slash-separated, relative to the
// function directory dir) in the bundle, going by DefaultIgnores and dir's IgnoreFile only
// (not by whether rel exists, nor by a directory above it being left out). Errors are
// loadIgnore's: an IgnoreFile that cannot be read or holds a bad pattern.
func Packed(dir, rel string, isDir bool) (bool, error) {
	rules, err := loadIgnore(dir)
	if err != nil {
		return false, err
	}
	return !rules.ignored(rel, isDir), nil
}
