package function

import "github.com/zygo-run/zygo/internal/zygote"

// SetStopZygote replaces how m stops a retired deployment's zygote.
func SetStopZygote(m *Manager, stop func(*zygote.Zygote)) { m.stopZygote = stop }
