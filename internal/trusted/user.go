package trusted

import (
	"os/user"
	"strconv"
)

func lookupUser(uid int) (string, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
