package echofence

// DecodeRecord decodes a stored record for the external tests: its token and status.
func DecodeRecord(s string) (token int64, status int, err error) {
	r, err := decodeRecord(s)
	if err != nil {
		return 0, 0, err
	}
	return r.token, r.status, nil
}
