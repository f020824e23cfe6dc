// Command merkle-vectors produces and checks pmm's Merkle and signed-note test vectors with
// Go's golang.org/x/mod/sumdb/tlog and golang.org/x/mod/sumdb/note packages, an
// implementation independent of pmm's. Not built by CI; run by hand (see README.md here).
//
//	go run . gen > ../../tests/fixtures/merkle/go-vectors.json
//	go run . check < ../../tests/fixtures/merkle/pmm-outputs.json > ../../tests/fixtures/merkle/go-check.txt
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// leafData is the data of leaf i: 32 bytes, as pmm's leaves are an event hash's bytes.
func leafData(i int) []byte {
	h := sha256.Sum256([]byte(fmt.Sprintf("pmm leaf %d", i)))
	return h[:]
}

type memHashes []tlog.Hash

func (m *memHashes) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = (*m)[x]
	}
	return out, nil
}

func hx(h tlog.Hash) string { return hex.EncodeToString(h[:]) }

func hxs(p []tlog.Hash) []string {
	out := []string{}
	for _, h := range p {
		out = append(out, hx(h))
	}
	return out
}

type inclusion struct {
	Index int64    `json:"index"`
	Size  int64    `json:"size"`
	Leaf  string   `json:"leaf"`
	Root  string   `json:"root"`
	Path  []string `json:"path"`
}

type consistency struct {
	From     int64    `json:"from"`
	To       int64    `json:"to"`
	RootFrom string   `json:"root_from"`
	RootTo   string   `json:"root_to"`
	Path     []string `json:"path"`
}

type vectors struct {
	Generator   string        `json:"generator"`
	LeafData    []string      `json:"leaf_data"`
	Roots       []string      `json:"roots"`
	Inclusion   []inclusion   `json:"inclusion"`
	Consistency []consistency `json:"consistency"`
	SignerKey   string        `json:"signer_key"`
	VerifierKey string        `json:"verifier_key"`
	Checkpoint  string        `json:"checkpoint"`
	SignedNote  string        `json:"signed_note"`
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "merkle-vectors:", err)
		os.Exit(2)
	}
}

func gen() {
	const n = 70
	var stored memHashes
	v := vectors{Generator: "golang.org/x/mod/sumdb/tlog and sumdb/note (scripts/merkle-vectors)"}
	for i := 0; i < n; i++ {
		d := leafData(i)
		v.LeafData = append(v.LeafData, hex.EncodeToString(d))
		hs, err := tlog.StoredHashes(int64(i), d, &stored)
		must(err)
		stored = append(stored, hs...)
	}
	roots := make([]tlog.Hash, n+1)
	for s := 0; s <= n; s++ {
		r, err := tlog.TreeHash(int64(s), &stored)
		must(err)
		roots[s] = r
		v.Roots = append(v.Roots, hx(r))
	}
	for s := int64(1); s <= n; s++ {
		for i := int64(0); i < s; i++ {
			if s > 16 && (s%5 != 0 || i%9 != 0) && i != s-1 {
				continue
			}
			p, err := tlog.ProveRecord(s, i, &stored)
			must(err)
			v.Inclusion = append(v.Inclusion, inclusion{i, s, hx(tlog.RecordHash(leafData(int(i)))), hx(roots[s]), hxs(p)})
		}
		for m := int64(1); m < s; m++ {
			if s > 16 && (s%5 != 0 || m%7 != 0) && m != s-1 {
				continue
			}
			p, err := tlog.ProveTree(s, m, &stored)
			must(err)
			v.Consistency = append(v.Consistency, consistency{m, s, hx(roots[m]), hx(roots[s]), hxs(p)})
		}
	}
	// A key from a fixed seed, so the vectors are reproducible; Ed25519 signing is
	// deterministic.
	seed := sha256.Sum256([]byte("pmm merkle-vectors test key"))
	skey, vkey, err := note.GenerateKey(bytes.NewReader(seed[:]), "go.example/pmm-vectors")
	must(err)
	signer, err := note.NewSigner(skey)
	must(err)
	cp := fmt.Sprintf("go.example/pmm-vectors\n%d\n%s\n", n, base64.StdEncoding.EncodeToString(roots[n][:]))
	msg, err := note.Sign(&note.Note{Text: cp}, signer)
	must(err)
	v.SignerKey, v.VerifierKey, v.Checkpoint, v.SignedNote = skey, vkey, cp, string(msg)
	out, err := json.Marshal(v)
	must(err)
	os.Stdout.Write(append(out, '\n'))
}

// pmmOutputs is what scripts/merkle-vectors/pmm-side.sh collects from the real programs.
type pmmOutputs struct {
	VerifierKey string            `json:"verifier_key"`
	SignedNote  string            `json:"signed_note"`
	Records     []json.RawMessage `json:"records"`
}

func unhex(s string) tlog.Hash {
	b, err := hex.DecodeString(s)
	must(err)
	var h tlog.Hash
	copy(h[:], b)
	return h
}

func unhexs(p []string) []tlog.Hash {
	out := []tlog.Hash{}
	for _, s := range p {
		out = append(out, unhex(s))
	}
	return out
}

func check() {
	var in pmmOutputs
	must(json.NewDecoder(os.Stdin).Decode(&in))
	fails := 0
	say := func(what string, err error) {
		if err != nil {
			fails++
			fmt.Printf("FAIL %s: %v\n", what, err)
		} else {
			fmt.Printf("ok   %s\n", what)
		}
	}
	verifier, err := note.NewVerifier(in.VerifierKey)
	say("note.NewVerifier(pmm verifier key)", err)
	var cpSize int64
	var cpRoot tlog.Hash
	if err == nil {
		n, err := note.Open([]byte(in.SignedNote), note.VerifierList(verifier))
		say("note.Open(pmm signed checkpoint)", err)
		if err == nil {
			lines := strings.Split(n.Text, "\n")
			cpSize, _ = strconv.ParseInt(lines[1], 10, 64)
			b, _ := base64.StdEncoding.DecodeString(lines[2])
			copy(cpRoot[:], b)
			bad := *n
			bad.Text = strings.Replace(n.Text, "\n"+lines[1]+"\n", "\n"+strconv.FormatInt(cpSize+1, 10)+"\n", 1)
			forged := strings.Replace(in.SignedNote, n.Text, bad.Text, 1)
			_, err = note.Open([]byte(forged), note.VerifierList(verifier))
			if err == nil {
				say("note.Open refuses a pmm checkpoint with its size changed", fmt.Errorf("accepted"))
			} else {
				say("note.Open refuses a pmm checkpoint with its size changed", nil)
			}
		}
	}
	for _, raw := range in.Records {
		var r struct {
			Type     string   `json:"type"`
			Size     int64    `json:"size"`
			Index    int64    `json:"index"`
			Leaf     string   `json:"leaf"`
			Root     string   `json:"root"`
			From     int64    `json:"from"`
			To       int64    `json:"to"`
			RootFrom string   `json:"root_from"`
			RootTo   string   `json:"root_to"`
			Path     []string `json:"path"`
		}
		must(json.Unmarshal(raw, &r))
		switch r.Type {
		case "root":
			if r.Size == cpSize {
				var err error
				if unhex(r.Root) != cpRoot {
					err = fmt.Errorf("root %s is not the checkpoint's", r.Root)
				}
				say(fmt.Sprintf("pmm root of size %d is the signed checkpoint's", r.Size), err)
			}
		case "inclusion":
			say(fmt.Sprintf("tlog.CheckRecord(pmm inclusion proof: leaf %d, size %d)", r.Index, r.Size),
				tlog.CheckRecord(unhexs(r.Path), r.Size, unhex(r.Root), r.Index, unhex(r.Leaf)))
			if len(r.Path) > 0 {
				p := unhexs(r.Path)
				p[0][0] ^= 1
				if tlog.CheckRecord(p, r.Size, unhex(r.Root), r.Index, unhex(r.Leaf)) == nil {
					say("tlog.CheckRecord refuses it with a bit flipped", fmt.Errorf("accepted"))
				}
			}
		case "consistency":
			say(fmt.Sprintf("tlog.CheckTree(pmm consistency proof: %d -> %d)", r.From, r.To),
				tlog.CheckTree(unhexs(r.Path), r.To, unhex(r.RootTo), r.From, unhex(r.RootFrom)))
		}
	}
	fmt.Printf("%d failures\n", fails)
	if fails > 0 {
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: merkle-vectors gen|check")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "gen":
		gen()
	case "check":
		check()
	default:
		fmt.Fprintln(os.Stderr, "usage: merkle-vectors gen|check")
		os.Exit(2)
	}
}
