package secret

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// tenantRE is a runtime pool's tenant id: 1-63 of [a-z0-9-], starting and ending with a
// letter or digit (ValidTenant also refuses "--", so that TenantName's "__" separator is
// unambiguous).
var tenantRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidTenant checks a pool tenant id; the error wraps errdefs.ErrInvalidArgument and names
// field (an API field or a CLI flag). It lives here, not in internal/pool, because the CLI
// (which builds for darwin and windows) checks --tenant before it names a tenant's secret.
func ValidTenant(field, t string) error {
	if !tenantRE.MatchString(t) || strings.Contains(t, "--") {
		return fmt.Errorf("%w: %s: %q must be 1-63 of [a-z0-9-], starting and ending with a letter or digit, without \"--\"", errdefs.ErrInvalidArgument, field, t)
	}
	return nil
}

// TenantName returns the stored name of pool tenant's secret name: tenant_T__NAME, T being
// the tenant with each "-" as "_" (a secret name has no "-"). tenant must pass ValidTenant.
func TenantName(tenant, name string) string {
	return "tenant_" + strings.ReplaceAll(tenant, "-", "_") + "__" + name
}

// TenantPrefix begins every pool tenant's secret name (TenantName): a namespace of its own.
const TenantPrefix = "tenant_"

// ValidSharedName is ValidName for a secret that a function or sandbox names (manifest
// secrets, sandbox create --secret) or that is set without a tenant: a name in the tenants'
// namespace (TenantPrefix) is refused, so that no function or sandbox can read a pool
// tenant's secret and no caller can set one without saying whose it is. The error wraps
// errdefs.ErrInvalidArgument.
func ValidSharedName(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, TenantPrefix) {
		return fmt.Errorf("%w: secret name %q: names beginning with %s are pool tenants' secrets (zygo secret set --tenant T NAME); a function or sandbox cannot name one",
			errdefs.ErrInvalidArgument, name, TenantPrefix)
	}
	return nil
}
