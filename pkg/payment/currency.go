package payment

// Currencies: amounts everywhere are int64 minor units plus one of these
// ISO 4217 codes, never float, never decimal.

import "strings"

// iso4217 lists the active ISO 4217 alphabetic codes (list one, including
// funds codes and precious metals that gateways accept, excluding XTS/XXX).
const iso4217 = `AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB
BOV BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK
DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF
IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD
LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR
NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE
SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI
UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD XPF XPT
XSU XUA YER ZAR ZMW ZWG ZWL`

var known = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(iso4217) {
		m[c] = true
	}
	return m
}()

// KnownCurrency reports whether code is an ISO 4217 code. Codes are upper case:
// "usd" is not a code.
func KnownCurrency(code string) bool { return known[code] }
