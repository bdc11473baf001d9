"""User side of τ²-bench's ``telecom`` domain: the customer's phone and where they are.

In dual-control mode these tools belong to the user simulator (the agent tells
the user what to tap); in solo mode the agent calls them itself. Observation
texts, the network-search simulation, the speed model and the MMS rules follow
τ²-bench's mock phone. Methods without ``@tool`` are the setup functions tasks
run to break the phone before the conversation (``turn_data_off``,
``break_apn_settings``...) and the assertions checked afterwards.
"""

from __future__ import annotations

from typing import Any, Literal

from memrl.envs.domains.telecom import model as m
from memrl.envs.domains.telecom.device_base import PhoneState
from memrl.envs.toolkit import tool

_SIGNAL_BARS = {"none": "📵 No Signal", "poor": "📶¹ Poor", "fair": "📶² Fair", "good": "📶³ Good",
                "excellent": "📶⁴ Excellent"}
_SPEED_ADVICE = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}
_SIM_TEXT = {"active": "Your SIM card is active and working.", "missing": "No SIM card detected in the phone.",
             "locked_pin": "The SIM card is locked with a PIN code.",
             "locked_puk": "The SIM card is locked with a PUK code."}


class TelecomUserTools(PhoneState):
    """The phone's settings screens and diagnostics, as a user can reach them."""

    tau2_class = "tau2.domains.telecom.user_tools:TelecomUserTools"

    def status_bar(self) -> str:
        """The icons at the top of the screen, joined by ' | ' (airplane mode hides the cellular ones)."""
        d = self.device
        icons = []
        if d["airplane_mode"]:
            icons.append("✈️ Airplane Mode")
        else:
            icons.append(_SIGNAL_BARS.get(d["network_signal_strength"], "📵 No Signal"))
            tech = d["network_technology_connected"]
            if tech != "none":
                icons.append(tech)
            if d["data_enabled"] and tech != "none":
                icons.append("📱 Data Enabled")
                if d["data_saver_mode"]:
                    icons.append("🔽 Data Saver")
            else:
                icons.append("📵 Data Disabled")
        if d["wifi_enabled"] and d["wifi_connected"]:
            icons.append(f"📡 Connected to {d['wifi_ssid']}" if d["wifi_ssid"] else "📡 Enabled")
        if d["vpn_connected"]:
            icons.append("🔒 VPN Connected")
        icons.append(f"🔋 {d['battery_level']}%")
        return " | ".join(icons)

    def _with_bar(self, text: str) -> str:
        return f"{text}\nStatus Bar: {self.status_bar()}"

    # -- status and network ---------------------------------------------------------------------------
    @tool("read")
    def check_status_bar(self) -> str:
        """Show the icons in the phone's status bar: signal strength, mobile data (enabled, disabled, data
        saver), Wi-Fi, VPN and battery level."""
        return f"Status Bar: {self.status_bar()}"

    @tool("read")
    def check_network_status(self) -> str:
        """Show the phone's connection to cellular networks and Wi-Fi: airplane mode, SIM, signal, network
        type, whether mobile data and data roaming are enabled."""
        d = self.device
        lines = [f"Airplane Mode: {'ON' if d['airplane_mode'] else 'OFF'}",
                 f"SIM Card Status: {self.sim_status()}",
                 f"Cellular Connection: {d['network_connection_status']}",
                 f"Cellular Signal: {d['network_signal_strength']}",
                 f"Cellular Network Type: {d['network_technology_connected']}",
                 f"Mobile Data Enabled: {'Yes' if d['data_enabled'] else 'No'}",
                 f"Data Roaming Enabled: {'Yes' if d['roaming_enabled'] else 'No'}",
                 f"Wi-Fi Radio: {'ON' if d['wifi_enabled'] else 'OFF'}",
                 f"Wi-Fi Connected: {'Yes' if d['wifi_connected'] else 'No'}"]
        if d["wifi_connected"]:
            lines.append(f"Connected Wi-Fi Network: {d['wifi_ssid']}")
        return "\n".join(lines)

    @tool("read")
    def check_network_mode_preference(self) -> str:
        """Show which kind of cellular network the phone prefers."""
        return f"Network Mode Preference: {self.device['network_mode_preference']}"

    @tool("write")
    def set_network_mode_preference(self, mode: str) -> str:
        """Choose the kind of cellular network the phone prefers (faster 4G/5G, or 3G/2G only); the phone
        searches for a network again.

        Args:
            mode: One of '4g_5g_preferred', '4g_only', '3g_only', '2g_only'.
        """
        failed = (f"Failed to set network mode: '{mode}' is not a valid option. "
                  f"Please use one of: {', '.join(m.NETWORK_MODES)}")
        if isinstance(mode, str) and mode not in m.NETWORK_MODES:
            return self._with_bar(failed)
        # τ² stores a value that is not a string as given and searches again; None then reads as a failure,
        # anything else fails reading the mode's name (`.value`), after the change
        self.device["network_mode_preference"] = mode
        self.simulate_network_search()
        if mode is None:
            return self._with_bar(failed)
        name = mode if isinstance(mode, str) else getattr(mode, "value")
        return self._with_bar(f"Preferred Network Mode set to: {name}")

    @tool("read")
    def run_speed_test(self) -> str:
        """Measure the phone's mobile download speed and say what it is good enough for."""
        speed, desc = self.speed_test()
        if speed is None:
            return f"Speed test failed: {desc or 'Could not determine speed'}."
        return f"Speed Test Result: {speed:.2f} Mbps ({desc}). {_SPEED_ADVICE.get(desc, '')}"

    # -- airplane mode, SIM, data, roaming ----------------------------------------------------------
    @tool("write")
    def toggle_airplane_mode(self) -> str:
        """Turn airplane mode on or off. On, it cuts every radio: cellular, Wi-Fi and Bluetooth."""
        on = self.flip_airplane_mode()
        return self._with_bar(f"Airplane Mode is now {'ON' if on else 'OFF'}.")

    @tool("read")
    def check_sim_status(self) -> str:
        """Show whether the SIM card works: active, missing, or locked with a PIN or PUK code."""
        status = self.sim_status()
        return _SIM_TEXT.get(status, f"Unknown SIM status: {status}")

    @tool("write")
    def reseat_sim_card(self) -> str:
        """Take the SIM card out and put it back in, which can fix a SIM the phone does not recognise."""
        self.device["sim_card_missing"] = False
        self.simulate_network_search()
        return self._with_bar("SIM card re-seated successfully.")

    @tool("write")
    def toggle_data(self) -> str:
        """Turn mobile data on or off: whether the phone may use the cellular network for internet."""
        on = self.flip("data_enabled", search=True)
        return self._with_bar(f"Mobile Data is now {'ON' if on else 'OFF'}.")

    @tool("write")
    def toggle_roaming(self) -> str:
        """Turn data roaming on or off: whether the phone may use data networks outside the carrier's
        coverage (abroad)."""
        on = self.flip("roaming_enabled", search=True)
        return self._with_bar(f"Data Roaming is now {'ON' if on else 'OFF'}.")

    @tool("read")
    def check_data_restriction_status(self) -> str:
        """Show whether a data-limiting feature (Data Saver mode) is on."""
        if self.device["data_saver_mode"]:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @tool("write")
    def toggle_data_saver_mode(self) -> str:
        """Turn Data Saver mode on or off. On, it reduces data use and may slow data down."""
        on = self.flip("data_saver_mode")
        return self._with_bar(f"Data Saver Mode is now {'ON' if on else 'OFF'}.")

    # -- APN ------------------------------------------------------------------------------------------
    @tool("read")
    def check_apn_settings(self) -> str:
        """Show the APN settings used to reach the carrier's data network: the APN name and the MMSC URL
        used for picture messages."""
        apn = self.device["active_apn_settings"]
        return (f"Current APN Name: {apn['apn_name'] or 'Not Set'}\n"
                f"MMSC URL (for picture messages): {apn['mmsc_url'] or 'Not Set'}\n"
                "(These are technical settings, usually best left unchanged.)")

    @tool("write")
    def set_apn_settings(self, apn_settings: dict[str, Any]) -> str:
        """Replace the phone's APN settings (fields left out take their default values).

        Args:
            apn_settings: The settings: apn_name ('internet' or 'broken'), reset_at_reboot, mms_apn,
                mmsc_url, mms_proxy, mms_port.
        """
        if isinstance(apn_settings, dict):  # as τ²: validated by its pydantic model, unknown fields refused
            apn_settings = m.APNSettings(**apn_settings).model_dump(mode="json")
        self.device["active_apn_settings"] = apn_settings
        # τ² reads the new name after storing the value: anything but a dict fails here, already stored
        name = apn_settings["apn_name"] if isinstance(apn_settings, dict) else getattr(apn_settings, "apn_name")
        self.simulate_network_search()
        return self._with_bar(f"APN settings set to: {name}")

    @tool("write")
    def reset_apn_settings(self) -> str:
        """Reset the APN settings to the carrier's defaults; this takes effect at the next reboot."""
        self.device["active_apn_settings"]["reset_at_reboot"] = True
        self.simulate_network_search()
        return self._with_bar("APN settings will reset at reboot.")

    # -- Wi-Fi and Wi-Fi calling ----------------------------------------------------------------------
    @tool("read")
    def check_wifi_status(self) -> str:
        """Show whether Wi-Fi is on, which network it is connected to and the signal strength."""
        d = self.device
        if not d["wifi_enabled"]:
            return "Wi-Fi is turned OFF."
        if d["wifi_connected"]:
            return f"Wi-Fi is ON and connected to '{d['wifi_ssid']}'. Signal strength: {d['wifi_signal_strength']}."
        return "Wi-Fi is ON but not connected to any network."

    @tool("write")
    def toggle_wifi(self) -> str:
        """Turn the Wi-Fi radio on or off (not possible while airplane mode is on)."""
        d = self.device
        if d["airplane_mode"]:
            return self._with_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        d["wifi_enabled"] = not d["wifi_enabled"]
        if not d["wifi_enabled"]:
            self.drop_wifi()
        return self._with_bar(f"Wi-Fi is now {'ON' if d['wifi_enabled'] else 'OFF'}.")

    @tool("read")
    def check_wifi_calling_status(self) -> str:
        """Show whether Wi-Fi Calling (calls over Wi-Fi instead of the cellular network) is on."""
        return f"Wi-Fi Calling is currently turned {'ON' if self.device['wifi_calling_enabled'] else 'OFF'}."

    @tool("write")
    def toggle_wifi_calling(self) -> str:
        """Turn Wi-Fi Calling on or off; it helps where the cellular signal is weak."""
        on = self.flip("wifi_calling_enabled")
        return self._with_bar(f"Wi-Fi Calling is now {'ON' if on else 'OFF'}.")

    # -- VPN --------------------------------------------------------------------------------------------
    @tool("read")
    def check_vpn_status(self) -> str:
        """Show whether a VPN is on and connected, with the connection's details."""
        d = self.device
        if d["vpn_connected"]:
            if d["vpn_details"]:
                return f"VPN is ON and connected. Details: {self.vpn_details_text()}"
            return "VPN is ON and connected (no specific details available)."
        if d["vpn_enabled_setting"]:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool("write")
    def connect_vpn(self) -> str:
        """Connect to the VPN."""
        d = self.device
        if d["vpn_connected"]:
            return "VPN already connected."
        d["vpn_connected"] = True
        d["vpn_details"] = m.SHARED_VPN  # by reference, as τ²-bench (see model.SHARED_VPN)
        return self._with_bar("VPN connected successfully.")

    @tool("write")
    def disconnect_vpn(self) -> str:
        """Disconnect the active VPN connection, which may change speed or what content is reachable."""
        done = self.drop_vpn()
        return self._with_bar("VPN disconnected successfully." if done else "No active VPN connection to disconnect.")

    # -- apps and MMS -----------------------------------------------------------------------------------
    @tool("read")
    def check_installed_apps(self) -> str:
        """List the apps installed on the phone."""
        return f"The following apps are installed on the phone: {', '.join(self.device['app_statuses'])}"

    @tool("read")
    def check_app_status(self, app_name: str) -> str:
        """Show an app's details: the permissions it has.

        Args:
            app_name: The app's name, such as 'messaging'.
        """
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = self.granted(app)
        lines = [f"Status for App: {app_name}"]
        if granted:
            lines += [" - Permissions Granted:", *(f"   - {p}" for p in granted)]
        else:
            lines.append(" - Permissions: None granted.")
        return "\n".join(lines)

    @tool("read")
    def check_app_permissions(self, app_name: str) -> str:
        """Show which permissions (storage, camera, location...) an app has.

        Args:
            app_name: The app's name, such as 'messaging'.
        """
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = self.granted(app)
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @tool("write")
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Give an app a permission (such as storage or sms) that some of its functions need.

        Args:
            app_name: The app's name, such as 'messaging'.
            permission: The permission to grant, in lowercase, such as 'storage'.
        """
        app = self.device["app_statuses"].get(app_name)
        permission = permission.lower()
        if app is None:
            return self._with_bar(f"Error. App '{app_name}' not found. Cannot grant permission.")
        if permission not in app["permissions"]:
            return self._with_bar(f"Error. Permission '{permission}' not tracked for app '{app_name}', "
                                  f"available permissions: {list(app['permissions'])}")
        app["permissions"][permission] = True
        return self._with_bar(f"Success. Permission '{permission}' granted to app '{app_name}'.")

    @tool("read")
    def can_send_mms(self) -> str:
        """Check whether the default messaging app can send MMS (picture) messages."""
        if self.mms_works():
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    @tool("write")
    def reboot_device(self) -> str:
        """Restart the phone, which refreshes its services and connections and clears many glitches."""
        return self._with_bar(self.reboot())

    # -- payments ---------------------------------------------------------------------------------------
    @tool("read")
    def check_payment_request(self) -> str:
        """Check whether the agent has sent a request to pay a bill."""
        req = self.surroundings.get("payment_request")
        if req is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {req['bill_id']} of {req['amount_due']} USD."

    @tool("write")
    def make_payment(self) -> str:
        """Pay the bill the agent sent a payment request for."""
        req = self.surroundings.get("payment_request")
        if req is None:
            return "You do not have a payment request."
        req["paid"] = True
        return f"Payment of {req['amount_due']} USD has been made for bill {req['bill_id']}."

    # -- kept for τ²-bench task files that name these setup functions -------------------------------
    def lock_sim_card(self, mode: Literal["pin", "puk"]) -> str:
        """Setup: lock the SIM with a PIN or PUK (no tool can fix this)."""
        self.device["sim_card_status"] = "locked_pin" if mode == "pin" else "locked_puk"
        self.simulate_network_search()
        return f"SIM card locked successfully in {mode} mode."
