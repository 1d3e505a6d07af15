// Text, training data and checkpoint files: the WordPiece tokenizer and corpus reader
// (lt.text), masked-language-model batches (lt.data) and safetensors files (lt.safetensors).
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>
#include <vector>

#include "bindings.h"
#include "lazytensor/mlm.h"
#include "lazytensor/safetensors.h"
#include "lazytensor/text.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace lt_python {

void bind_data(nb::module_& m) {
  nb::module_ text = m.def_submodule("text", "BERT's WordPiece tokenizer and corpus reading");
  nb::class_<lt::text::WordPieceTokenizer>(text, "WordPieceTokenizer")
      .def(nb::init<const std::string&, bool>(), "vocab_path"_a, "lower_case"_a = true)
      .def("tokenize", &lt::text::WordPieceTokenizer::tokenize, "text"_a)
      .def("encode", &lt::text::WordPieceTokenizer::encode, "text"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("token_to_id", &lt::text::WordPieceTokenizer::token_to_id, "token"_a)
      .def("id_to_token", &lt::text::WordPieceTokenizer::id_to_token, "id"_a)
      .def_prop_ro("vocab_size", &lt::text::WordPieceTokenizer::vocab_size)
      .def_prop_ro("pad_id", &lt::text::WordPieceTokenizer::pad_id)
      .def_prop_ro("unk_id", &lt::text::WordPieceTokenizer::unk_id)
      .def_prop_ro("cls_id", &lt::text::WordPieceTokenizer::cls_id)
      .def_prop_ro("sep_id", &lt::text::WordPieceTokenizer::sep_id)
      .def_prop_ro("mask_id", &lt::text::WordPieceTokenizer::mask_id);
  nb::class_<lt::text::Document>(text, "Document")
      .def_ro("source", &lt::text::Document::source)
      .def_ro("text", &lt::text::Document::text);
  text.def("read_corpus", &lt::text::read_corpus, "path"_a,
           nb::call_guard<nb::gil_scoped_release>());

  nb::module_ data = m.def_submodule("data", "Masked-language-model training batches");
  nb::class_<lt::data::MlmOptions>(data, "MlmOptions")
      .def(nb::init<>())
      .def_rw("vocab_size", &lt::data::MlmOptions::vocab_size)
      .def_rw("mask_id", &lt::data::MlmOptions::mask_id)
      .def_rw("special_ids", &lt::data::MlmOptions::special_ids)
      .def_rw("mask_prob", &lt::data::MlmOptions::mask_prob)
      .def_rw("replace_mask", &lt::data::MlmOptions::replace_mask)
      .def_rw("replace_random", &lt::data::MlmOptions::replace_random);
  data.def(
      "mask_tokens",
      [](const lt::Tensor& ids, const lt::data::MlmOptions& options) {
        const lt::data::MlmBatch batch = lt::data::mask_tokens(ids, options);
        return nb::make_tuple(batch.input_ids, batch.labels);
      },
      "ids"_a, "options"_a, "(input_ids, labels): 15% of the tokens predicted, on the device");
  data.def(
      "mask_tokens",
      [](const std::vector<int64_t>& ids, int64_t batch, int64_t seq_len,
         const lt::data::MlmOptions& options, uint64_t key, int64_t first_row) {
        const lt::data::MlmBatch b =
            lt::data::mask_tokens(ids, batch, seq_len, options, key, first_row);
        return nb::make_tuple(b.input_ids, b.labels, b.predicted_positions, b.predicted_labels);
      },
      "ids"_a, "batch"_a, "seq_len"_a, "options"_a, "key"_a, "first_row"_a = 0,
      "(input_ids, labels, predicted_positions, predicted_labels): the same masking by the host, "
      "from host ids [batch * seq_len] and a key; positions b * L + l of the predicted tokens, "
      "padded with 0 (label -100) to predicted_capacity(), for a head run at those rows only");
  data.def("predicted_capacity", &lt::data::predicted_capacity, "tokens"_a, "mask_prob"_a,
           "rows of predicted_positions: the mean count plus six standard deviations, in "
           "multiples of 32");
  nb::class_<lt::data::TokenWindows>(data, "TokenWindows")
      .def(nb::init<std::vector<int64_t>, int64_t, int64_t, int64_t, uint64_t>(), "stream"_a,
           "seq_len"_a, "cls_id"_a, "sep_id"_a, "seed"_a)
      .def("__len__", &lt::data::TokenWindows::size)
      .def_prop_ro("seq_len", &lt::data::TokenWindows::seq_len)
      .def("shuffled_batch", &lt::data::TokenWindows::shuffled_batch, "index"_a, "batch_size"_a)
      .def("ordered_batch", &lt::data::TokenWindows::ordered_batch, "first"_a, "batch_size"_a)
      .def("shuffled_ids", &lt::data::TokenWindows::shuffled_ids, "index"_a, "batch_size"_a)
      .def("ordered_ids", &lt::data::TokenWindows::ordered_ids, "first"_a, "batch_size"_a)
      .def("window", &lt::data::TokenWindows::window, "w"_a);

  nb::module_ st = m.def_submodule("safetensors", "Reading and writing safetensors files");
  st.def(
      "load",
      [](const std::string& path) {
        lt::safetensors::File file;
        {
          const nb::gil_scoped_release release;
          file = lt::safetensors::load(path);
        }
        nb::dict tensors;
        for (const lt::safetensors::NamedTensor& t : file.tensors) {
          tensors[nb::str(t.name.c_str())] = t.tensor;
        }
        return nb::make_tuple(tensors, file.metadata);
      },
      "path"_a, "(tensors by name, in the file's order; metadata)");
  st.def(
      "save",
      [](const std::string& path, nb::dict tensors, const lt::safetensors::Metadata& metadata) {
        std::vector<lt::safetensors::NamedTensor> named;
        for (auto [name, value] : tensors) {
          if (!nb::isinstance<lt::Tensor>(value) || !nb::isinstance<nb::str>(name)) {
            throw nb::type_error("safetensors.save: expects a dict of str -> lazytensor.Tensor");
          }
          named.push_back({nb::cast<std::string>(name), nb::cast<lt::Tensor>(value)});
        }
        const nb::gil_scoped_release release;
        lt::safetensors::save(path, named, metadata);
      },
      "path"_a, "tensors"_a, "metadata"_a = lt::safetensors::Metadata{},
      "Writes atomically: a temporary file, then a rename");
}

}  // namespace lt_python
