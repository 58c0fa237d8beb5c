package wire

import "unicode/utf8"

// MaxRefusalText bounds Text: a refusal's body is a peer's, and its text
// is logged on every retry and carried in errors.
const MaxRefusalText = 300

// Text is how a refusal read by ReadRefusal reads in a log or an error:
// its code, then its message in parentheses when it has one, cut to
// MaxRefusalText bytes (on a character boundary, marked "…"). Its field,
// when it names one, is for the caller to put first.
func (v ValidationError) Text() string {
	text := v.Error
	if v.Message != "" {
		text += " (" + v.Message + ")"
	}
	if len(text) <= MaxRefusalText {
		return text
	}
	cut := MaxRefusalText
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}
