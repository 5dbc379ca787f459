// A user error in one setting (a bench's timed rounds, a fold's device): the core says what is
// wrong in its own words and names the setting; each front end spells it its own way (the CLI
// as the flag --<setting>, the GUI by the field the user edited), so no core message names a flag.
#pragma once

#include <string>

#include "foldnorm/common/error.h"

namespace foldnorm {

class SettingError : public Error {
 public:
  SettingError(std::string setting, const std::string& message) : Error(message), setting_(std::move(setting)) {}
  /// The setting's name ("reps", "device"): the CLI's flag without its dashes.
  const std::string& setting() const { return setting_; }

 private:
  std::string setting_;
};

}  // namespace foldnorm
